"""Who logged in (gateway.protocol._sasl_login): the name each mechanism's first client
token claims, the SaslAuthenticate bodies, the login's rounds, and the readers feeding
it through a SaslHandshake v0 exchange cut at every byte (test_sasl.py's wire)."""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from gateway.protocol import Malformed
from gateway.protocol._sasl import HANDSHAKE, IDLE, TOKENS
from gateway.protocol._sasl_login import (
    AUTHENTICATED,
    FAILED,
    TOKEN_READ_LIMIT,
    UNOBSERVED,
    SaslLogin,
    authenticate_result,
    authenticate_token,
    claimed_name,
    jwt_claim,
    oauthbearer_name,
    plain_name,
    scram_name,
    scram_unescape,
)
from tests.unit._kafka import build, kio_request, kio_response, schema_module, top_level
from tests.unit.gateway.protocol.test_sasl import (
    EMPTY,
    OAUTH_ACK,
    OAUTH_CLIENT,
    OAUTH_ERROR,
    PLAIN,
    SCRAM_CLIENT_FINAL,
    SCRAM_CLIENT_FIRST,
    SCRAM_SERVER_FINAL,
    SCRAM_SERVER_FIRST,
    Step,
    Wire,
    broker,
    client,
    handshake,
    handshake_response,
    plain_login,
    play,
    replays,
    token,
)
from tests.unit.gateway.protocol.test_streams import metadata, metadata_response


def jwt(claims: Any, header: Any = None) -> str:
    def part(value: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part(header or {'alg': 'none'})}.{part(claims)}."


def bearer(token_text: str, gs2: str = "n,,") -> bytes:
    return f"{gs2}\x01auth=Bearer {token_text}\x01\x01".encode()


# -- the names tokens claim ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("token_bytes", "name"),
    [
        (b"\0alice\0secret", "alice"),
        (b"alice\0alice\0secret", "alice"),  # an authorization id that is the same
        (b"admin\0alice\0secret", None),  # one that differs: Kafka refuses it
        ("\0jos\u00e9\0pw".encode(), "jos\u00e9"),
        (b"\0alice\0", None),  # no password
        (b"\0\0secret", None),  # no authentication id
        (b"alice\0secret", None),  # two fields
        (b"\0alice\0secret\0more", None),  # four
        (b"\0al\xffice\0secret", None),  # not UTF-8
        (b"", None),
    ],
)
def test_plain_names_the_authentication_id(token_bytes: bytes, name: str | None) -> None:
    assert plain_name(token_bytes) == name


@pytest.mark.parametrize(
    ("token_bytes", "name"),
    [
        (b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL", "alice"),
        (b"n,,n=a=2Cb=3Dc,r=nonce", "a,b=c"),  # SCRAM's escapes, unescaped
        (b"n,,n==3D2C,r=nonce", "=2C"),  # =3D first: "=" then "2C" literally
        (b"n,a=alice,n=alice,r=nonce", "alice"),
        (b"n,a=admin,n=alice,r=nonce", None),  # another authorization id
        (b"n,,n=alice,r=nonce,ext=1", "alice"),
        (b"n,,n=tokenid,r=nonce,tokenauth=true", None),  # a delegation token
        (b"n,,m=reserved,n=alice,r=nonce", "alice"),
        (b"n,,n=a=41b,r=nonce", None),  # an escape SCRAM does not have
        (b"y,,n=alice,r=nonce", None),  # channel binding: Kafka refuses it
        (b"n,,n=alice", None),  # no nonce
        (b"n,,n=,r=nonce", None),
        (b"n,,n=al\xc3\xa9,r=nonce", None),  # Kafka's saslname is ASCII
        (b"\xff\xfe", None),
    ],
)
def test_scram_names_the_unescaped_user(token_bytes: bytes, name: str | None) -> None:
    assert scram_name(token_bytes) == name


def test_scram_unescape_is_kafkas() -> None:
    assert scram_unescape("a=2Cb") == "a,b"
    assert scram_unescape("a=3Db") == "a=b"
    assert scram_unescape("a=b") is None


@pytest.mark.parametrize(
    ("token_bytes", "claim", "name"),
    [
        (bearer(jwt({"sub": "alice", "exp": 1})), "sub", "alice"),
        (bearer(jwt({"sub": "alice", "client_id": "svc-7"})), "client_id", "svc-7"),
        (bearer(jwt({"sub": "alice"})), "client_id", None),  # no such claim
        (bearer(jwt({"sub": 42})), "sub", None),  # not a string
        (bearer(jwt({"sub": ""})), "sub", None),
        (bearer(jwt(["sub", "alice"])), "sub", None),  # not an object
        (bearer(jwt({"sub": "alice"}), gs2="n,a=alice,"), "sub", "alice"),
        (bearer(jwt({"sub": "alice"}), gs2="n,a=admin,"), "sub", None),
        (bearer("not-a-jwt"), "sub", None),
        (bearer("a.%%%.c"), "sub", None),
        (bearer("eyJhbGciOiJub25lIn0.bm90IGpzb24."), "sub", None),  # not JSON
        (f"n,,\x01auth=Basic {jwt({'sub': 'alice'})}\x01\x01".encode(), "sub", None),
        (b"n,,\x01host=kafka\x01\x01", "sub", None),  # no auth pair
        (b"\x01", "sub", None),  # the client's answer to an error challenge
    ],
)
def test_oauthbearer_names_the_configured_claim(
    token_bytes: bytes, claim: str, name: str | None
) -> None:
    assert oauthbearer_name(token_bytes, claim) == name


def test_jwt_claim_reads_the_payload_without_the_signature() -> None:
    signed = jwt({"sub": "alice"}, {"alg": "RS256"})[:-1] + ".c2lnbmF0dXJl"
    assert jwt_claim(signed, "sub") == "alice"
    deep = "[" * 100_000  # json.loads recurses on nesting: no RecursionError escapes
    payload = base64.urlsafe_b64encode(deep.encode()).decode()
    assert jwt_claim(f"e30.{payload}.", "sub") is None


GOOD_TOKENS = {
    "PLAIN": PLAIN[4:],
    "SCRAM-SHA-512": SCRAM_CLIENT_FIRST[4:],
    "OAUTHBEARER": OAUTH_CLIENT[4:],
}


@pytest.mark.parametrize("mechanism", sorted(GOOD_TOKENS))
def test_truncated_and_garbled_tokens_name_nobody_and_raise_nothing(mechanism: str) -> None:
    good = GOOD_TOKENS[mechanism]
    assert claimed_name(mechanism, good, "sub") == "alice"
    for cut in range(len(good)):
        # A PLAIN token cut inside its password still names alice (and is refused by
        # the broker); any other cut names nobody.
        assert claimed_name(mechanism, good[:cut], "sub") in (None, "alice"), cut
    rng = random.Random(7)
    for _ in range(300):
        garbled = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            garbled[rng.randrange(len(garbled))] = rng.randrange(256)
        claimed_name(mechanism, bytes(garbled), "sub")
        claimed_name(mechanism, rng.randbytes(rng.randint(0, 64)), "sub")


def test_unread_mechanisms_and_oversized_tokens_name_nobody() -> None:
    assert claimed_name("GSSAPI", PLAIN[4:], "sub") is None
    assert claimed_name("PLAIN", b"\0alice\0" + b"x" * TOKEN_READ_LIMIT, "sub") is None


# -- SaslAuthenticate bodies -------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_authenticate_request_and_response_bodies_read_at_every_version(version: int) -> None:
    secret = b"\0alice\0alice-secret"
    request = kio_request("sasl_authenticate", version, 5, auth_bytes=secret)
    body = request.frame[4 + request.header_len :]
    assert bytes(authenticate_token(version, body)) == secret
    tags = 1 if version >= 2 else 0  # the body's tagged section, not read
    for cut in range(len(body) - tags):
        with pytest.raises(Malformed):
            authenticate_token(version, body[:cut])

    cls = top_level(schema_module("sasl_authenticate", version, "response"))
    header = 5 if version >= 2 else 4  # correlation id, and v2's tagged fields
    for error_code, answer in ((0, b""), (0, b"r=nonce,s=salt,i=4096"), (58, b"")):
        error = ErrorCode(error_code)
        response = kio_response(5, build(cls, error_code=error, auth_bytes=answer))
        body = response.frame[4 + header :]
        assert authenticate_result(version, body) == (error_code, len(answer))
        for cut in range(2):
            with pytest.raises(Malformed):
                authenticate_result(version, body[:cut])


# -- one connection's logins -------------------------------------------------------------


class Watcher:
    sasl_claim = "sub"

    def __init__(self) -> None:
        self.settled: list[tuple[str | None, str | None, str | None]] = []

    def sasl_settled(self, login: SaslLogin, previous: str | None) -> None:
        self.settled.append((login.outcome, login.name, previous))


def logged_in(mechanism: str, rounds: int, tokens: list[bytes], answers: list[tuple[int, int]]):
    watcher = Watcher()
    login = SaslLogin(watcher)
    login.begin(mechanism, rounds)
    for sent, answer in zip(tokens, answers, strict=False):
        login.client_token(sent)
        login.server_token(*answer)
    return login, watcher


def test_plain_login_is_trusted_only_once_the_broker_accepted_it() -> None:
    login, watcher = logged_in("PLAIN", 1, [PLAIN[4:]], [])
    login.client_token(PLAIN[4:])
    assert login.name is None and not watcher.settled  # sent, not answered yet
    login.server_token(0, 0)
    assert (login.outcome, login.name) == (AUTHENTICATED, "alice")
    assert watcher.settled == [(AUTHENTICATED, "alice", None)]


def test_a_refused_round_or_an_unasked_answer_leaves_no_principal() -> None:
    scram = [SCRAM_CLIENT_FIRST[4:], SCRAM_CLIENT_FINAL[4:]]
    login, watcher = logged_in("SCRAM-SHA-512", 2, scram, [(0, 80), (58, 0)])
    assert (login.outcome, login.name) == (FAILED, None)
    assert watcher.settled == [(FAILED, None, None)]
    login, _ = logged_in("PLAIN", 1, [], [])
    login.server_token(0, 0)  # an answer before any token: not trusted
    assert (login.outcome, login.name) == (FAILED, None)


def test_scram_needs_both_rounds() -> None:
    scram = [SCRAM_CLIENT_FIRST[4:], SCRAM_CLIENT_FINAL[4:]]
    login, watcher = logged_in("SCRAM-SHA-256", 2, scram[:1], [(0, 80)])
    assert login.outcome is None and not watcher.settled
    login.client_token(scram[1])
    login.server_token(0, 30)
    assert (login.outcome, login.name) == (AUTHENTICATED, "alice")


def test_oauthbearer_error_challenge_is_a_failure() -> None:
    login, _ = logged_in("OAUTHBEARER", 1, [OAUTH_CLIENT[4:]], [(0, len(OAUTH_ERROR) - 4)])
    assert (login.outcome, login.name) == (FAILED, None)


def test_gssapi_and_unknown_mechanisms_are_unobserved() -> None:
    for mechanism, rounds in (("GSSAPI", None), ("EXTERNAL", None), ("PLAIN", 0)):
        login, watcher = logged_in(mechanism, rounds, [b"\x60\x82"], [(0, 10)])
        assert (login.outcome, login.name, login.mechanism) == (UNOBSERVED, None, mechanism)
        assert watcher.settled == [(UNOBSERVED, None, None)]


def test_reauthentication_replaces_the_principal_and_reports_the_previous_one() -> None:
    login, watcher = logged_in("PLAIN", 1, [PLAIN[4:]], [(0, 0)])
    login.begin("PLAIN", 1)
    assert login.name == "alice"  # kept while the re-authentication is under way
    login.client_token(b"\0bob\0bob-secret")
    login.server_token(0, 0)
    login.begin("PLAIN", 1)
    login.client_token(b"\0bob\0wrong")
    login.server_token(58, 0)
    assert watcher.settled == [
        (AUTHENTICATED, "alice", None),
        (AUTHENTICATED, "bob", "alice"),
        (FAILED, None, "bob"),
    ]


# -- the readers: SaslHandshake v0 raw tokens and v1's mechanism, cut everywhere ------------


def names_after(steps: list[Step]) -> set[tuple[str | None, str | None, str | None]]:
    """(mechanism, outcome, name) of the connection's login after each replay."""
    seen = set()
    for label, pieces in replays(steps):
        wire: Wire = play(steps, pieces, label)
        login = wire.inflight.sasl.login
        assert login is not None, label
        seen.add((login.mechanism, login.outcome, login.name))
    return seen


def test_v0_plain_login_names_alice_at_every_cut() -> None:
    assert names_after(plain_login()) == {("PLAIN", AUTHENTICATED, "alice")}


def test_v0_scram_login_names_alice_only_after_the_last_round() -> None:
    rounds = [
        client(handshake(0, 1, "SCRAM-SHA-512"), state=HANDSHAKE),
        broker(handshake_response(0, 1), state=TOKENS),
        client(SCRAM_CLIENT_FIRST, state=TOKENS),
        broker(SCRAM_SERVER_FIRST, state=TOKENS),
        client(SCRAM_CLIENT_FINAL, state=TOKENS),
    ]
    assert names_after(rounds) == {("SCRAM-SHA-512", None, None)}
    done = [*rounds, broker(SCRAM_SERVER_FINAL, state=IDLE), client(metadata(1, 2), state=IDLE)]
    assert names_after(done) == {("SCRAM-SHA-512", AUTHENTICATED, "alice")}


def test_v0_oauthbearer_accepted_and_challenged() -> None:
    steps = [
        client(handshake(0, 1, "OAUTHBEARER"), state=HANDSHAKE),
        broker(handshake_response(0, 1), state=TOKENS),
        client(OAUTH_CLIENT, state=TOKENS),
    ]
    accepted = [*steps, broker(EMPTY, state=IDLE), client(metadata(12, 2), state=IDLE)]
    assert names_after(accepted) == {("OAUTHBEARER", AUTHENTICATED, "alice")}
    challenged = [*steps, broker(OAUTH_ERROR, state=TOKENS), client(OAUTH_ACK, state=TOKENS)]
    assert names_after(challenged) == {("OAUTHBEARER", FAILED, None)}


def test_v0_refused_handshake_and_garbled_token_name_nobody() -> None:
    refused = [
        client(handshake(0, 1, "PLAIN"), state=HANDSHAKE),
        broker(handshake_response(0, 1, error_code=34), state=IDLE),
    ]
    assert names_after(refused) == {("PLAIN", FAILED, None)}
    garbled = [
        client(handshake(0, 1, "PLAIN"), state=HANDSHAKE),
        broker(handshake_response(0, 1), state=TOKENS),
        client(token(b"alice-secret"), state=TOKENS),
        broker(EMPTY, state=IDLE),
    ]
    assert names_after(garbled) == {("PLAIN", AUTHENTICATED, None)}


def test_v1_handshake_starts_a_login_of_its_mechanism_at_every_cut() -> None:
    steps = [
        client(handshake(1, 1, "SCRAM-SHA-256"), metadata(12, 2), state=IDLE),
        broker(handshake_response(1, 1), metadata_response(12, 2), state=IDLE),
    ]
    for label, pieces in replays(steps):
        login = play(steps, pieces, label).inflight.sasl.login
        assert login is not None and login.mechanism == "SCRAM-SHA-256", label
        assert login.outcome is None, label  # its tokens come in SaslAuthenticate


def test_a_long_first_token_is_forwarded_as_it_comes_and_names_nobody() -> None:
    wire = Wire()
    wire.client_sends(handshake(0, 1, "PLAIN").frame)
    wire.broker_sends(handshake_response(0, 1).frame)
    big = token(b"\0alice\0" + b"x" * (2 * TOKEN_READ_LIMIT))
    half = TOKEN_READ_LIMIT // 2
    wire.client_sends(big[:half])  # within the limit: waited for
    assert wire.upstream[1:] == []
    first = TOKEN_READ_LIMIT + 100
    wire.client_sends(big[half:first])
    # Past the limit the token is not waited for: what came went upstream already.
    assert sum(len(bytes(i)) for i in wire.upstream[1:]) == first
    wire.client_sends(big[first:])
    wire.broker_sends(EMPTY)
    login = wire.inflight.sasl.login
    assert login is not None and (login.outcome, login.name) == (AUTHENTICATED, None)
