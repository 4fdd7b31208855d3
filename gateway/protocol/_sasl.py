"""SaslHandshake v0: following Kafka's raw-token SASL framing from both directions.

With SaslHandshake v1 the SASL tokens travel inside SaslAuthenticate requests and
responses, ordinary frames the readers already handle (KIP-368 re-authentication in the
middle of a connection included). With **SaslHandshake v0** Kafka switches the wire to
raw tokens once the handshake succeeded: the client sends length-prefixed tokens with no
request header, the broker answers with length-prefixed tokens with no correlation id,
and normal requests resume when the exchange is done. Neither reader may parse a token
as a header, so both consult one ``SaslExchange`` per connection (held by the
connection's ``InFlight``). The rules:

1. The ``RequestReader`` sees a SaslHandshake v0 request it forwards and reads its
   mechanism (request header v1, then the mechanism as an int16-length string). Until
   the broker has answered it, client bytes behind it are **held**, not parsed: whether
   they are a token or a request depends on the answer. (Clients wait for the answer
   anyway; holding only matters for one that pipelines, and is capped at Kafka's
   ``sasl.server.max.receive.size`` default, 512 KiB.) The I/O layer asks
   ``RequestReader.resume()`` for held bytes once the broker's side moved on.
2. The ``ResponseReader`` reads the error code (the first int16 after the v0 response
   header) of that request's response. Non-zero: nothing changes (a PLAINTEXT listener
   answers ILLEGAL_SASL_STATE and keeps the connection; an unknown mechanism makes the
   broker close it). Zero: from the next frame on, both directions carry raw tokens.
3. Every token is forwarded untouched, whatever its size (an empty token is a frame of
   length 0: the broker answers a PLAIN token with one). Correlation ids are not matched
   and no ``InFlight`` entry is made: nothing else is outstanding, because the client
   sends nothing but tokens after the handshake and the handshake response was the last
   one awaited; so no local answer falls into the exchange either. (The one local
   answer made later, UpdateFeatures after its ZooKeeper write, would have to be sent
   before the handshake, which no client authenticating with SASL does.)
4. How long the exchange lasts depends on the mechanism:

   - PLAIN: 1 round (client token, broker's empty token).
   - SCRAM-SHA-256 / SCRAM-SHA-512: 2 rounds (client-first/server-first,
     client-final/server-final).
   - OAUTHBEARER: 1 round; every non-empty broker token (an error challenge) adds one
     more, in which the client sends ``\\x01`` (and the broker then closes).

   For these, client and broker strictly alternate: a client token waits for the
   broker's reply before the next client frame is read (held, as in rule 1), and the
   exchange ends with the broker token of the last round.
   - GSSAPI and mechanisms not listed: the number of rounds is not fixed, and the last
     client token may get no reply at all (Kafka sends nothing when the SASL server
     returns no token, as GSSAPI's does at the end). So nothing is held: the first client
     frame is a token, and each later one is peeked at: it ends the exchange only if it
     reads as a plausible request header (an API key the gateway knows, a version in
     that key's range, a client id and, for flexible versions, tagged fields that parse
     within the frame), otherwise it is another token. Broker frames are tokens until
     the exchange ended. (GSSAPI tokens start with 0x60 or 0x05 0x04, never a known
     API key.)

5. A failed authentication makes the broker close the connection; the gateway closes
   the client side with it, as for any upstream close.
6. A SaslHandshake v0 in the middle of a connection is handled exactly like the first:
   Apache Kafka 4.4 accepts one as a KIP-368 re-authentication on a listener with
   ``connections.max.reauth.ms`` set (raw tokens follow, as after the first), and answers
   ILLEGAL_SASL_STATE elsewhere (tests/integration/test_kafka_security.py).
7. Who logged in (``gateway.protocol._sasl_login``): every SaslHandshake, v0 or v1,
   starts a login of its mechanism (``SaslExchange.login``, made at the first one). With
   v0 the first client token of a mechanism whose name is read is waited for whole (up
   to ``TOKEN_READ_LIMIT``; a longer one names nobody) before it is forwarded, and each
   broker token is an answer; with v1 the SaslAuthenticate filter feeds the same login
   (``gateway.interceptors.apis.sasl_authenticate``). Not a byte changes either way.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ._apis import api_spec
from ._sasl_login import OAUTHBEARER, TOKEN_READ_LIMIT, LoginWatcher, SaslLogin
from ._walk import skip_tagged_fields
from ._wire import (
    Incomplete,
    Malformed,
    read_classic_string,
    skip_classic_string,
)

if TYPE_CHECKING:
    from ._entry import InFlightRequest

# Rounds of the mechanisms with a fixed number of them; others are followed by peeking.
FIXED_ROUNDS: dict[str, int] = {
    "PLAIN": 1,
    "SCRAM-SHA-256": 2,
    "SCRAM-SHA-512": 2,
    "OAUTHBEARER": 1,
}

# Client bytes held while the exchange waits for the broker: Kafka's default
# sasl.server.max.receive.size. A client that waits for its turn holds nothing here.
HOLD_LIMIT = 512 * 1024

# SaslExchange.state
IDLE = 0  # normal Kafka frames
HANDSHAKE = 1  # a SaslHandshake v0 request was forwarded; its response has not come
TOKENS = 2  # raw tokens in both directions

# SaslExchange.client_frame verdicts
TOKEN = 0  # forward the frame as a token
REQUEST = 1  # the exchange is over; the frame is a Kafka request
HOLD = 2  # not the client's turn: hold the bytes until the broker moved on
MORE = 3  # cannot tell yet: wait for more of the frame

_KEY_VERSION = struct.Struct(">hh")


def handshake_mechanism(payload: bytes | bytearray | memoryview) -> str:
    """The mechanism of a SaslHandshake v0/v1 request payload (no length prefix).

    Raises Incomplete when ``payload`` ends before the mechanism does.
    """
    pos = skip_classic_string(payload, 8)  # header v1: key, version, correlation id, client id
    mechanism, _ = read_classic_string(payload, pos)
    if mechanism is None:
        raise Malformed("SaslHandshake mechanism is null")
    return mechanism


def plausible_request_header(
    payload: bytes | bytearray | memoryview, complete: bool
) -> bool | None:
    """Whether the start of a frame reads as a Kafka request header; None: need more.

    ``complete`` says ``payload`` is the whole frame, so a header running past it is
    not a header.
    """
    if len(payload) < 4:
        return False if complete else None
    key, version = _KEY_VERSION.unpack_from(payload, 0)
    spec = api_spec(key)
    if spec is None or not spec.min_version <= version <= spec.max_version:
        return False
    try:
        if len(payload) < 8:  # the correlation id
            raise Incomplete
        pos = skip_classic_string(payload, 8)  # client id
        if spec.request_header_version(version) == 2:
            skip_tagged_fields(payload, pos)
    except Incomplete:
        return False if complete else None
    except Malformed:
        return False
    return True


class SaslExchange:
    """Where one connection stands in a SaslHandshake v0 exchange (see module docstring).

    Shared by the connection's two readers; ``state`` is read on their hot paths.
    """

    __slots__ = (
        "client_tokens",
        "completed",
        "handshake",
        "login",
        "mechanism",
        "rounds",
        "server_tokens",
        "state",
        "watcher",
    )

    def __init__(self) -> None:
        self.state = IDLE
        self.mechanism = ""
        # The in-flight SaslHandshake v0 request whose response decides (state HANDSHAKE).
        self.handshake: InFlightRequest | None = None
        # Rounds of a fixed-round mechanism; None: peek at client frames instead.
        self.rounds: int | None = None
        self.client_tokens = 0
        self.server_tokens = 0
        self.completed = 0  # raw-token exchanges that ended with a return to requests
        # Who logged in: made at the first SaslHandshake, told to ``watcher`` (the
        # connection's, set by the server layer; None: nobody listens).
        self.login: SaslLogin | None = None
        self.watcher: LoginWatcher | None = None

    def begin_login(self, mechanism: str) -> None:
        """A SaslHandshake (v0 or v1) asked for ``mechanism``: a login starts."""
        login = self.login
        if login is None:
            login = self.login = SaslLogin(self.watcher)
        login.begin(mechanism, FIXED_ROUNDS.get(mechanism))

    def handshake_sent(self, entry: InFlightRequest, mechanism: str) -> None:
        self.state = HANDSHAKE
        self.handshake = entry
        self.mechanism = mechanism
        self.begin_login(mechanism)

    def handshake_answered(self, error_code: int) -> None:
        self.handshake = None
        if error_code != 0:
            self.state = IDLE
            if self.login is not None:
                self.login.abandon()
            return
        self.state = TOKENS
        self.rounds = FIXED_ROUNDS.get(self.mechanism)
        self.client_tokens = self.server_tokens = 0

    def client_frame(self, payload: bytes | bytearray | memoryview, complete: bool) -> int:
        """The verdict on a client frame starting while ``state`` is not IDLE.

        ``payload`` is what is here of the frame (no length prefix); ``complete`` says
        it is all of it. A TOKEN verdict counts the token.
        """
        if self.state == HANDSHAKE:
            return HOLD
        if self.rounds is None:
            if self.client_tokens:
                verdict = plausible_request_header(payload, complete)
                if verdict is None:
                    return MORE
                if verdict:
                    self._done()
                    return REQUEST
            self.client_tokens += 1
            return TOKEN
        if self.client_tokens > self.server_tokens:
            return HOLD
        login = self.login
        if login is not None:
            if not login.wants_token:
                login.client_token(None)
            elif complete:
                login.client_token(payload)
            elif len(payload) <= TOKEN_READ_LIMIT:
                return MORE  # the name is in the first token: read it whole
            else:
                login.client_token(None)
        self.client_tokens += 1
        return TOKEN

    def server_frame(self, size: int) -> None:
        """A broker token of ``size`` bytes starts (state TOKENS)."""
        self.server_tokens += 1
        if self.login is not None:
            self.login.server_token(0, size)
        rounds = self.rounds
        if rounds is None:
            return
        if size and self.mechanism == OAUTHBEARER:
            # An error challenge: the client answers it with one more token (\x01).
            rounds = self.rounds = max(rounds, self.server_tokens + 1)
        if self.server_tokens >= rounds:
            self._done()

    def _done(self) -> None:
        self.state = IDLE
        self.completed += 1
