"""SaslHandshake v0 raw tokens (and v1/KIP-368 frames) through RequestReader/ResponseReader.

Each test plays a conversation: steps of bytes from the client or from the broker, in the
order they happen on a real connection (a client sends its next token only after the
broker's reply reached it). ``Wire`` feeds both readers the way the proxy does, including
``RequestReader.resume()`` after broker bytes. Every conversation is replayed with each
step cut in two at every position, byte by byte, and in random pieces; the checks are
what the proxy would see: the bytes going each way, the events, the in-flight table and
where the SASL exchange stands after each step.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from gateway.protocol import (
    InFlight,
    ProtocolViolation,
    RequestFrame,
    RequestReader,
    ResponseFrame,
    ResponseReader,
)
from gateway.protocol._sasl import (
    HANDSHAKE,
    HOLD_LIMIT,
    IDLE,
    TOKENS,
    handshake_mechanism,
    plausible_request_header,
)
from tests.unit._kafka import (
    Req,
    Resp,
    build,
    frame,
    kio_request,
    kio_response,
    produce,
    schema_module,
    top_level,
)
from tests.unit.gateway.protocol.test_streams import (
    api_versions,
    api_versions_response,
    byte_by_byte,
    forwarded,
    metadata,
    metadata_response,
    normalize,
    pending,
    produce_response,
    random_pieces,
)

# -- messages --------------------------------------------------------------------------


def handshake(version: int, correlation_id: int, mechanism: str) -> Req:
    return kio_request("sasl_handshake", version, correlation_id, mechanism=mechanism)


def handshake_response(version: int, correlation_id: int, error_code: int = 0) -> Resp:
    cls = top_level(schema_module("sasl_handshake", version, "response"))
    mechanisms = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]
    return kio_response(
        correlation_id, build(cls, error_code=ErrorCode(error_code), mechanisms=mechanisms)
    )


def authenticate(version: int, correlation_id: int, token: bytes) -> Req:
    return kio_request("sasl_authenticate", version, correlation_id, auth_bytes=token)


def authenticate_response(version: int, correlation_id: int, token: bytes) -> Resp:
    cls = top_level(schema_module("sasl_authenticate", version, "response"))
    return kio_response(correlation_id, build(cls, auth_bytes=token))


def token(data: bytes) -> bytes:
    """A raw SASL token frame: a length prefix and the token, no header."""
    return frame(data)


PLAIN = token(b"\x00alice\x00alice-secret")
EMPTY = token(b"")  # what the broker answers a good PLAIN token with
SCRAM_CLIENT_FIRST = token(b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL")
SCRAM_SERVER_FIRST = token(
    b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
)
SCRAM_CLIENT_FINAL = token(
    b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
)
SCRAM_SERVER_FINAL = token(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")
OAUTH_CLIENT = token(b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.\x01\x01")
OAUTH_ERROR = token(b'{"status":"invalid_token","scope":"kafka"}')
OAUTH_ACK = token(b"\x01")
# GSSAPI: the initial context token is ASN.1 [APPLICATION 0] (0x60), wrap tokens 0x0504.
GSS_AP_REQ = token(b"\x60\x82\x01\x10\x06\x09\x2a\x86\x48\x86\xf7\x12\x01\x02\x02" + bytes(260))
GSS_AP_REP = token(b"\x60\x81\x90\x06\x09\x2a\x86\x48\x86\xf7\x12\x01\x02\x02" + bytes(140))
GSS_WRAP_CHALLENGE = token(b"\x05\x04\x01\xff\x00\x0c\x00\x00" + bytes(24) + b"\x07\x00\x10\x00")
GSS_WRAP_RESPONSE = token(b"\x05\x04\x00\xff\x00\x0c\x00\x00" + bytes(24) + b"\x01\x00\x10\x00")
# Tokens of an unknown mechanism that start like request headers but are none:
# Metadata at a version beyond every schema; a client id running past the frame; a
# flexible Metadata header whose tagged-field section runs past the frame.
NEAR_MISS_VERSION = token(struct.pack(">hhi", 3, 99, 7) + b"\x00\x00")
NEAR_MISS_CLIENT_ID = token(struct.pack(">hhih", 3, 1, 7, 300) + b"abc")
NEAR_MISS_TAGGED = token(struct.pack(">hhih", 3, 12, 7, 2) + b"ab" + b"\x02\x00\x7f")

LOCAL = frame(struct.pack(">i", 2) + b"local ApiVersions answer")

# -- the simulated proxy ---------------------------------------------------------------


class Wire:
    """Both readers of one connection, fed as ``ClientConnection`` feeds them."""

    def __init__(self, intercept: Any = None, max_frame_bytes: int | None = None) -> None:
        self.inflight = InFlight()
        limit = {"max_frame_bytes": max_frame_bytes} if max_frame_bytes else {}
        self.requests = RequestReader(self.inflight, intercept, **limit)
        self.responses = ResponseReader(self.inflight, **limit)
        self.upstream: list[Any] = []  # what the proxy writes to the broker, and events
        self.client: list[Any] = []  # what it writes to the client, and events

    def client_sends(self, data: bytes) -> None:
        self._to_upstream(self.requests.feed(data))

    def broker_sends(self, data: bytes) -> None:
        self.client += self.responses.feed(data)
        if self.requests.held:
            self._to_upstream(self.requests.resume())

    def _to_upstream(self, items: list[Any]) -> None:
        for item in items:
            self.upstream.append(item)
            if isinstance(item, RequestFrame):  # the proxy answers ApiVersions itself
                self.client += self.inflight.answer_locally(item.request, LOCAL)


@dataclass(frozen=True)
class Step:
    side: str  # "client" or "broker"
    data: bytes
    state: int  # where the exchange stands after this step
    held: int = 0  # trailing client bytes not yet forwarded after this step


def client(*frames: Req | bytes, state: int, held: int = 0) -> Step:
    return Step("client", _join(frames), state, held)


def broker(*frames: Resp | bytes, state: int) -> Step:
    return Step("broker", _join(frames), state)


def _join(frames: Sequence[Req | Resp | bytes]) -> bytes:
    return b"".join(f if isinstance(f, bytes) else f.frame for f in frames)


def replays(steps: Sequence[Step], seed: int = 1) -> Iterator[tuple[str, list[list[bytes]]]]:
    """(label, pieces per step): each step cut at every position, then byte by byte,
    then random pieces."""
    whole = [[s.data] for s in steps]
    for i, step in enumerate(steps):
        for cut in range(len(step.data) + 1):
            pieces = list(whole)
            pieces[i] = [step.data[:cut], step.data[cut:]]
            yield f"step {i} cut {cut}", pieces
    yield "byte by byte", [byte_by_byte(s.data) for s in steps]
    for r in range(3):
        yield f"random {r}", [random_pieces(s.data, seed * 10 + r, 13) for s in steps]


def play(
    steps: Sequence[Step],
    pieces: Sequence[Sequence[bytes]],
    label: str,
    wire: Wire | None = None,
    intercepted: int = 0,
) -> Wire:
    """Feed the steps, checking after each what went where and the exchange's state.

    ``intercepted``: bytes of client frames the gateway answers itself (never forwarded).
    """
    wire = wire or Wire()
    client_total = broker_total = 0
    for i, (step, parts) in enumerate(zip(steps, pieces, strict=True)):
        for part in parts:
            if step.side == "client":
                wire.client_sends(part)
            else:
                wire.broker_sends(part)
        if step.side == "client":
            client_total += len(step.data)
        else:
            broker_total += len(step.data)
        where = f"{label}, after step {i}"
        assert len(forwarded(wire.upstream)) == client_total - step.held - intercepted, where
        assert wire.inflight.sasl.state == step.state, where
        assert wire.requests.held == bool(step.held), where
    assert not [i for i in wire.upstream + wire.client if isinstance(i, ProtocolViolation)]
    return wire


def sweep(steps: Sequence[Step], outstanding: Sequence[int] = ()) -> None:
    """Replay everywhere; every byte must pass untouched both ways, no event in between."""
    client_bytes = b"".join(s.data for s in steps if s.side == "client")
    broker_bytes = b"".join(s.data for s in steps if s.side == "broker")
    for label, pieces in replays(steps):
        wire = play(steps, pieces, label)
        assert normalize(wire.upstream) == [client_bytes], label
        assert normalize(wire.client) == [broker_bytes], label
        assert pending(wire.inflight) == list(outstanding), label
        assert not wire.requests.mid_frame and not wire.responses.mid_frame, label


# -- fixed-round mechanisms ------------------------------------------------------------


def plain_login(first_id: int = 1) -> list[Step]:
    """ApiVersions and SaslHandshake v0 pipelined, one PLAIN round, then requests."""
    a, h, m, p = first_id, first_id + 1, first_id + 2, first_id + 3
    return [
        client(api_versions(3, a), handshake(0, h, "PLAIN"), state=HANDSHAKE),
        broker(api_versions_response(3, a), handshake_response(0, h), state=TOKENS),
        client(PLAIN, state=TOKENS),
        broker(EMPTY, state=IDLE),
        client(metadata(12, m), produce(9, p, acks=1, transactional_id=None), state=IDLE),
        broker(metadata_response(12, m), produce_response(9, p), state=IDLE),
    ]


def test_plain_tokens_pass_untouched_at_every_cut() -> None:
    sweep(plain_login())


def test_premise_tokens_misread_as_kafka_frames_break_both_readers() -> None:
    # What the readers would do without knowing the exchange: the PLAIN token becomes an
    # awaited "request" (key 97), the broker's empty token a malformed response.
    inflight = InFlight()
    assert forwarded(RequestReader(inflight).feed(PLAIN)) == PLAIN
    assert [e.api_key for e in inflight.entries] == [0x0061]
    (violation,) = ResponseReader(InFlight()).feed(EMPTY + metadata_response(1, 1).frame)
    assert isinstance(violation, ProtocolViolation) and violation.reason == "malformed_frame"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_two_rounds_at_every_cut(mechanism: str) -> None:
    sweep(
        [
            client(handshake(0, 1, mechanism), state=HANDSHAKE),
            broker(handshake_response(0, 1), state=TOKENS),
            client(SCRAM_CLIENT_FIRST, state=TOKENS),
            broker(SCRAM_SERVER_FIRST, state=TOKENS),
            client(SCRAM_CLIENT_FINAL, state=TOKENS),
            broker(SCRAM_SERVER_FINAL, state=IDLE),
            client(metadata(1, 2), state=IDLE),
            broker(metadata_response(1, 2), state=IDLE),
        ]
    )


def test_oauthbearer_accepted_token_is_one_round_at_every_cut() -> None:
    sweep(
        [
            client(handshake(0, 1, "OAUTHBEARER"), state=HANDSHAKE),
            broker(handshake_response(0, 1), state=TOKENS),
            client(OAUTH_CLIENT, state=TOKENS),
            broker(EMPTY, state=IDLE),
            client(metadata(12, 2), state=IDLE),
            broker(metadata_response(12, 2), state=IDLE),
        ]
    )


def test_oauthbearer_error_challenge_adds_the_clients_ack_round_at_every_cut() -> None:
    # Kafka closes after the \x01; were a broker to answer it, requests would resume.
    steps = [
        client(handshake(0, 1, "OAUTHBEARER"), state=HANDSHAKE),
        broker(handshake_response(0, 1), state=TOKENS),
        client(OAUTH_CLIENT, state=TOKENS),
        broker(OAUTH_ERROR, state=TOKENS),
        client(OAUTH_ACK, state=TOKENS),  # 1 byte: as a request it would be malformed
    ]
    sweep(steps)
    sweep([*steps, broker(EMPTY, state=IDLE), client(metadata(1, 2), state=IDLE)], [2])


# -- mechanisms followed by peeking ----------------------------------------------------


def test_gssapi_last_token_without_reply_then_a_request_ends_the_exchange_at_every_cut() -> None:
    # GSSAPI's last client token gets no reply (Kafka sends nothing when the SASL
    # server returns no token); the client's next frame is already a request.
    sweep(
        [
            client(handshake(0, 1, "GSSAPI"), state=HANDSHAKE),
            broker(handshake_response(0, 1), state=TOKENS),
            client(GSS_AP_REQ, state=TOKENS),
            broker(GSS_AP_REP, state=TOKENS),
            client(EMPTY, state=TOKENS),
            broker(GSS_WRAP_CHALLENGE, state=TOKENS),
            client(
                GSS_WRAP_RESPONSE,
                metadata(12, 2),
                produce(3, 3, acks=0, transactional_id=None),
                state=IDLE,
            ),
            broker(metadata_response(12, 2), state=IDLE),
        ]
    )


def test_unknown_mechanism_tokens_that_nearly_look_like_requests_stay_tokens_at_every_cut() -> None:
    sweep(
        [
            client(handshake(0, 1, "X-CUSTOM"), state=HANDSHAKE),
            broker(handshake_response(0, 1), state=TOKENS),
            # The first client frame is always a token, even one that reads as a request.
            client(metadata(1, 77).frame, state=TOKENS),
            broker(token(b"challenge-1"), state=TOKENS),
            client(NEAR_MISS_VERSION, state=TOKENS),
            broker(token(b"challenge-2"), state=TOKENS),
            client(NEAR_MISS_CLIENT_ID, state=TOKENS),
            broker(EMPTY, state=TOKENS),
            client(NEAR_MISS_TAGGED, state=TOKENS),
            broker(token(b"done"), state=TOKENS),
            client(api_versions(0, 2), state=IDLE),
            broker(api_versions_response(0, 2), state=IDLE),
        ]
    )


def test_exchange_counts_and_token_frames_are_not_requests() -> None:
    steps = plain_login()
    wire = play(steps, [[s.data] for s in steps], "whole")
    assert wire.inflight.sasl.completed == 1
    assert wire.requests.frames == 4  # ApiVersions, SaslHandshake, Metadata, Produce
    assert wire.inflight.fold().requests == {(18, 3): 1, (17, 0): 1, (3, 12): 1, (0, 9): 1}


# -- outcomes that change nothing -------------------------------------------------------


@pytest.mark.parametrize("error_code", [33, 34])  # UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE
def test_handshake_error_leaves_the_stream_as_it_was_at_every_cut(error_code: int) -> None:
    sweep(
        [
            client(handshake(0, 1, "PLAIN"), state=HANDSHAKE),
            broker(handshake_response(0, 1, error_code), state=IDLE),
            client(metadata(12, 2), metadata(1, 3), state=IDLE),
            broker(metadata_response(12, 2), metadata_response(1, 3), state=IDLE),
        ]
    )


def test_kip368_reauthentication_with_v1_frames_amid_pipelined_requests_at_every_cut() -> None:
    # SaslHandshake v1 and SaslAuthenticate are ordinary frames, whatever is around them.
    sweep(
        [
            client(
                metadata(12, 1),
                produce(9, 2, acks=1, transactional_id=None),
                handshake(1, 3, "SCRAM-SHA-256"),
                authenticate(2, 4, SCRAM_CLIENT_FIRST[4:]),
                authenticate(1, 5, SCRAM_CLIENT_FINAL[4:]),
                produce(9, 6, acks=0, transactional_id=None),
                metadata(12, 7),
                state=IDLE,
            ),
            broker(
                metadata_response(12, 1),
                produce_response(9, 2),
                handshake_response(1, 3),
                authenticate_response(2, 4, SCRAM_SERVER_FIRST[4:]),
                authenticate_response(1, 5, SCRAM_SERVER_FINAL[4:]),
                state=IDLE,
            ),
        ],
        outstanding=[7],
    )


def test_v0_handshake_in_the_middle_of_a_connection_behind_pipelined_requests() -> None:
    # Kafka re-authenticates with v1 only, but a v0 handshake mid-connection is followed
    # the same way: its answer comes after the earlier responses, then tokens.
    sweep(
        [
            *plain_login(),
            client(
                metadata(12, 10),
                produce(9, 11, acks=1, transactional_id=None),
                handshake(0, 12, "SCRAM-SHA-512"),
                state=HANDSHAKE,
            ),
            broker(
                metadata_response(12, 10),
                produce_response(9, 11),
                handshake_response(0, 12),
                state=TOKENS,
            ),
            client(SCRAM_CLIENT_FIRST, state=TOKENS),
            broker(SCRAM_SERVER_FIRST, state=TOKENS),
            client(SCRAM_CLIENT_FINAL, state=TOKENS),
            broker(SCRAM_SERVER_FINAL, state=IDLE),
            client(metadata(1, 13), state=IDLE),
        ],
        outstanding=[13],
    )


# -- order with local answers ------------------------------------------------------------


def _intercept_api_versions(key: int, version: int) -> bool:
    return key == 18


def test_local_answer_keeps_request_order_around_the_handshake_at_every_cut() -> None:
    # Metadata (upstream), ApiVersions (answered by the gateway), SaslHandshake v0: the
    # local answer waits for the Metadata response and precedes the handshake's, and the
    # tokens come after both.
    steps = [
        client(metadata(12, 1), api_versions(3, 2), handshake(0, 3, "PLAIN"), state=HANDSHAKE),
        broker(metadata_response(12, 1), handshake_response(0, 3), state=TOKENS),
        client(PLAIN, state=TOKENS),
        broker(EMPTY, state=IDLE),
    ]
    expected = metadata_response(12, 1).frame + LOCAL + handshake_response(0, 3).frame + EMPTY
    for label, pieces in replays(steps):
        wire = play(
            steps, pieces, label, Wire(_intercept_api_versions), len(api_versions(3, 2).frame)
        )
        assert forwarded(wire.client) == expected, label
        assert forwarded(wire.upstream) == b"".join(
            s.data for s in steps if s.side == "client"
        ).replace(api_versions(3, 2).frame, b""), label
        frames = [i for i in wire.upstream if isinstance(i, RequestFrame)]
        assert [f.header.correlation_id for f in frames] == [2], label
        assert len(wire.inflight) == 0, label


def test_intercepted_handshake_response_still_starts_the_exchange_at_every_cut() -> None:
    # An interceptor may gather the handshake response whole; the switch to raw tokens
    # must not depend on the response being streamed.
    answer = handshake_response(0, 1).frame
    data = answer + EMPTY
    for cut in range(len(data) + 1):
        inflight = InFlight()
        RequestReader(inflight).feed(handshake(0, 1, "PLAIN").frame)
        responses = ResponseReader(inflight, intercept=lambda entry: entry.api_key == 17)
        items = responses.feed(data[:cut])
        # The error code is the 10th byte; the empty token counts once its length is here.
        expected = HANDSHAKE if cut < 10 else TOKENS if cut < len(data) else IDLE
        assert inflight.sasl.state == expected, cut
        items += responses.feed(data[cut:])
        gathered, rest = normalize(items)
        assert isinstance(gathered, ResponseFrame) and gathered.frame == answer, cut
        assert gathered.request.api_key == 17 and rest == EMPTY, cut
        assert inflight.sasl.state == IDLE and len(inflight) == 0, cut


def test_handshake_the_gateway_answers_itself_starts_no_exchange() -> None:
    # E.g. the upstream lacks SaslHandshake v0: the proxy answers UNSUPPORTED_VERSION
    # locally, nothing reaches the broker, so what follows stays Kafka requests.
    inflight = InFlight()
    reader = RequestReader(inflight, intercept=lambda key, version: key == 17)
    items = reader.feed(handshake(0, 1, "PLAIN").frame + metadata(1, 2).frame)
    assert [type(i) for i in normalize(items)] == [RequestFrame, bytes]
    assert inflight.sasl.state == IDLE and pending(inflight) == [1, 2]


# -- clients that do not wait for their turn -------------------------------------------


def test_token_pipelined_behind_the_handshake_is_held_until_the_answer_at_every_cut() -> None:
    sweep(
        [
            client(handshake(0, 1, "PLAIN"), PLAIN, state=HANDSHAKE, held=len(PLAIN)),
            broker(handshake_response(0, 1), state=TOKENS),
            broker(EMPTY, state=IDLE),
            client(metadata(12, 2), state=IDLE),
        ],
        outstanding=[2],
    )


def test_request_pipelined_behind_a_refused_handshake_is_a_request_at_every_cut() -> None:
    sweep(
        [
            client(
                handshake(0, 1, "PLAIN"),
                metadata(12, 2),
                state=HANDSHAKE,
                held=len(metadata(12, 2).frame),
            ),
            broker(handshake_response(0, 1, 34), state=IDLE),
            broker(metadata_response(12, 2), state=IDLE),
        ]
    )


def test_scram_client_final_sent_before_server_first_waits_for_it_at_every_cut() -> None:
    sweep(
        [
            client(handshake(0, 1, "SCRAM-SHA-256"), state=HANDSHAKE),
            broker(handshake_response(0, 1), state=TOKENS),
            client(
                SCRAM_CLIENT_FIRST, SCRAM_CLIENT_FINAL, state=TOKENS, held=len(SCRAM_CLIENT_FINAL)
            ),
            broker(SCRAM_SERVER_FIRST, state=TOKENS),
            broker(SCRAM_SERVER_FINAL, state=IDLE),
        ]
    )


def test_held_bytes_count_as_mid_frame() -> None:
    # The client going away now leaves something unsent: the proxy counts an abort.
    wire = Wire()
    wire.client_sends(handshake(0, 1, "PLAIN").frame + PLAIN)
    assert wire.requests.held and wire.requests.mid_frame


def test_resume_without_held_bytes_is_a_no_op() -> None:
    assert RequestReader(InFlight()).resume() == []


# -- violations --------------------------------------------------------------------------

MAX = 1024


def _in_tokens(mechanism: str = "SCRAM-SHA-256") -> Wire:
    wire = Wire(max_frame_bytes=MAX)
    wire.client_sends(handshake(0, 1, mechanism).frame)
    wire.broker_sends(handshake_response(0, 1).frame)
    assert wire.inflight.sasl.state == TOKENS
    return wire


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (struct.pack(">i", -1) + b"xyz", "malformed_frame"),
        (struct.pack(">i", MAX + 1) + b"x" * 10, "oversize_frame"),
    ],
)
def test_bad_client_token_size_is_one_violation_at_every_cut(bad: bytes, reason: str) -> None:
    data = SCRAM_CLIENT_FIRST + bad
    for cut in range(len(data) + 1):
        wire = _in_tokens()
        wire.client_sends(data[:cut])
        wire.broker_sends(SCRAM_SERVER_FIRST)
        wire.client_sends(data[cut:])
        # The first token went out; the second frame (out of turn or not) is refused.
        violations = [i for i in wire.upstream if isinstance(i, ProtocolViolation)]
        assert [v.reason for v in violations] == [reason], cut
        assert forwarded(wire.upstream).endswith(SCRAM_CLIENT_FIRST), cut
        assert wire.requests.feed(metadata(1, 9).frame) == []


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (struct.pack(">i", -7), "malformed_frame"),
        (struct.pack(">i", MAX + 1) + b"x" * 10, "oversize_frame"),
    ],
)
def test_bad_broker_token_size_is_one_violation_at_every_cut(bad: bytes, reason: str) -> None:
    for cut in range(len(bad) + 1):
        wire = _in_tokens()
        wire.client_sends(SCRAM_CLIENT_FIRST)
        wire.broker_sends(bad[:cut])
        wire.broker_sends(bad[cut:])
        violations = [i for i in wire.client if isinstance(i, ProtocolViolation)]
        assert [v.reason for v in violations] == [reason], cut


def test_token_of_exactly_max_frame_bytes_passes() -> None:
    wire = _in_tokens("GSSAPI")
    big = token(b"\x60" + bytes(MAX - 1))
    wire.client_sends(big)
    assert forwarded(wire.upstream).endswith(big)


def test_handshake_request_whose_mechanism_runs_past_the_frame_is_malformed() -> None:
    bad = frame(struct.pack(">hhih", 17, 0, 1, 2) + b"id" + struct.pack(">h", 50) + b"PLAIN")
    for cut in range(len(bad) + 1):
        wire = Wire()
        wire.client_sends(bad[:cut])
        wire.client_sends(bad[cut:])
        (violation,) = wire.upstream
        assert isinstance(violation, ProtocolViolation), cut
        assert violation.reason == "malformed_frame" and "mechanism" in violation.detail
        assert wire.inflight.sasl.state == IDLE


def test_handshake_response_without_error_code_is_malformed() -> None:
    wire = Wire()
    wire.client_sends(handshake(0, 1, "PLAIN").frame)
    wire.broker_sends(frame(struct.pack(">i", 1) + b"\x00"))
    (violation,) = wire.client
    assert isinstance(violation, ProtocolViolation) and violation.reason == "malformed_frame"


def test_client_flooding_while_it_is_not_its_turn_is_cut_off() -> None:
    wire = Wire()
    wire.client_sends(handshake(0, 1, "PLAIN").frame)
    flood = token(bytes(1000))
    sent = 0
    while not any(isinstance(i, ProtocolViolation) for i in wire.upstream):
        wire.client_sends(flood)
        sent += len(flood)
        assert sent <= HOLD_LIMIT + len(flood)
    assert sent > HOLD_LIMIT
    assert forwarded(wire.upstream) == handshake(0, 1, "PLAIN").frame


# -- the helpers -----------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_handshake_mechanism_reads_the_mechanism(version: int) -> None:
    assert handshake_mechanism(handshake(version, 1, "SCRAM-SHA-512").frame[4:]) == "SCRAM-SHA-512"


@pytest.mark.parametrize(
    "req",
    [
        metadata(1, 1),
        metadata(12, 2, tagged={0: b"x"}),
        api_versions(3, 3),
        api_versions(0, 4, client_id=None),
    ],
    ids=["classic", "flexible-tagged", "api-versions-v3", "null-client-id"],
)
def test_plausible_request_header_accepts_real_headers_and_waits_for_them(req: Req) -> None:
    payload = req.frame[4:]
    assert plausible_request_header(payload, True) is True
    assert plausible_request_header(payload[: req.header_len], False) is True
    for cut in range(req.header_len):
        assert plausible_request_header(payload[:cut], False) is None, cut


@pytest.mark.parametrize(
    "frame_bytes",
    [
        NEAR_MISS_VERSION,
        NEAR_MISS_CLIENT_ID,
        NEAR_MISS_TAGGED,
        GSS_AP_REQ,
        GSS_WRAP_RESPONSE,
        EMPTY,
        PLAIN,
        OAUTH_ACK,
    ],
)
def test_plausible_request_header_rejects_tokens(frame_bytes: bytes) -> None:
    assert plausible_request_header(frame_bytes[4:], True) is False
