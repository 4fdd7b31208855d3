"""Sans-I/O splitting of the two byte streams of a proxied Kafka connection.

``RequestReader`` takes bytes from the client, ``ResponseReader`` bytes from the
upstream broker; both hand back a list whose items are either buffers to forward
untouched (``bytes``/``memoryview``) or events. Frames nobody asked for are never
copied into a frame buffer: the reader looks at their first bytes, records them in
the in-flight table and forwards them (even a 100 MiB fetch streams through in the
chunks the socket delivered). Only intercepted frames are gathered whole, except
responses whose only rewritable part is their top-level tagged section (KIP-951's
NodeEndpoints in a Fetch): those stream through and only that section is gathered;
and responses whose rewritable part is a "head" before their bulk (the brokers of a
Metadata response, before its topics): only the head is held back, handed out as a
``ResponseHead`` (length prefix included) and the rest streams through behind it.

Order of the list is the order on the wire; the I/O layer must keep it.

After a successful SaslHandshake v0 both readers pass raw SASL tokens (no headers)
until the exchange ends; the rules are in ``gateway.protocol._sasl``. Client bytes sent
out of turn meanwhile are held: the I/O layer calls ``RequestReader.resume()`` when
``RequestReader.held`` is set after feeding broker bytes.
"""

from __future__ import annotations

import contextlib
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter

from . import _sasl
from ._apis import PRODUCE, SASL_HANDSHAKE, api_name
from ._headers import RequestHeader, parse_request_header, produce_acks
from ._sasl import SaslExchange, handshake_mechanism
from ._stats import ApiStats
from ._walk import HeadFinder, TailFinder
from ._wire import INT16, INT32, Incomplete, Malformed

# Kafka's default socket.request.max.bytes (100 MiB): a frame larger than this closes
# the connection on a real broker too.
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024

_SIZE_KEY_VERSION_CORRELATION = struct.Struct(">ihhi")
_SIZE_CORRELATION = struct.Struct(">ii")


class InFlightRequest:
    """A request whose response is awaited (or, when ``local`` is set, already made)."""

    __slots__ = (
        "api_key",
        "api_version",
        "context",
        "correlation_id",
        "expects_response",
        "local",
        "request_bytes",
        "response_bytes",
        "started",
        "to_upstream",
    )

    def __init__(
        self,
        api_key: int,
        api_version: int,
        correlation_id: int,
        to_upstream: bool = True,
        expects_response: bool = True,
    ) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.started = perf_counter()
        # Frame sizes (length prefix included), for the request log.
        self.request_bytes = 0
        self.response_bytes = 0
        # A response the gateway produced itself; it is released to the client once
        # every earlier upstream response has gone out, because clients (the Java one
        # in particular) require responses in request order.
        self.local: bytes | None = None
        # Free slot for an interceptor that must remember something about the request
        # until its response arrives.
        self.context: object = None
        # False for a request the gateway answers itself (never sent upstream), so an
        # upstream response is never matched to it.
        self.to_upstream = to_upstream
        # False for an acks=0 produce: kept only to recognise a broker that answers it.
        self.expects_response = expects_response


# acks=0 produces remembered, per connection, while it is not yet known whether the
# broker answers them (Tansu does, Kafka does not). Past this many the rest are not
# recorded: their answers, if any, are then dropped as uncorrelated, which is what
# happens to them anyway.
ACKS0_KEPT = 1024


class InFlight:
    """Outstanding requests of one connection, in the order they were sent.

    Responses are matched by order, as Kafka's clients rely on: a broker answers the
    requests of one connection in the order it got them, so an upstream response answers
    the *earliest* outstanding upstream request with its correlation id. Clients may
    reuse correlation ids freely (Kafka never looks at them); the gateway's own upstream
    requests use negative ids, which are unique, so where they sit in the table does not
    matter.

    acks=0 produces get no response from Kafka, but some brokers (Tansu) answer them.
    They are kept as entries that expect no response: a response whose id matches one
    that comes before the next awaited request with that id is its answer and is
    dropped; when a later request's response arrives first, the broker does not answer
    acks=0 (``acks0_answered`` becomes False) and they are forgotten. The only case order
    cannot settle is an acks=0 produce followed by an awaited request with the *same*
    id before the broker has shown which kind it is; there Kafka's behaviour (no answer
    to acks=0) is assumed.
    """

    __slots__ = (
        "_entries",
        "_local_pending",
        "_optional",
        "acks0_answered",
        "observer",
        "sasl",
        "stats",
    )

    def __init__(self) -> None:
        self._entries: deque[InFlightRequest] = deque()
        self._local_pending = 0
        self._optional = 0  # acks=0 entries in _entries
        # Whether the upstream answers acks=0 produces; None until it has shown it.
        self.acks0_answered: bool | None = None
        self.stats = ApiStats()
        # A SaslHandshake v0 exchange switches both directions to raw tokens; the two
        # readers share this connection-wide state through the table they share.
        self.sasl = SaslExchange()
        # Called with each answered request (e.g. the request log); None costs nothing.
        self.observer: Callable[[InFlightRequest], None] | None = None

    def __len__(self) -> int:
        """Requests still awaiting a response (acks=0 produces do not count)."""
        return len(self._entries) - self._optional

    def add(
        self, api_key: int, api_version: int, correlation_id: int, to_upstream: bool = True
    ) -> InFlightRequest:
        entry = InFlightRequest(api_key, api_version, correlation_id, to_upstream)
        self._entries.append(entry)
        return entry

    def add_acks0(self, api_key: int, api_version: int, correlation_id: int) -> None:
        """An acks=0 produce went upstream: remember it while its answer may come."""
        if self.acks0_answered is False or self._optional >= ACKS0_KEPT:
            return
        self._entries.append(InFlightRequest(api_key, api_version, correlation_id, True, False))
        self._optional += 1

    def get(self, correlation_id: int) -> InFlightRequest | None:
        """The earliest awaited request with this correlation id."""
        for entry in self._entries:
            if entry.correlation_id == correlation_id and entry.expects_response:
                return entry
        return None

    def match_upstream(self, correlation_id: int) -> InFlightRequest | None:
        """The request an upstream response answers, or None if nothing awaits it.

        An entry with ``expects_response`` False is an acks=0 produce the broker
        answered: the caller drops the response and calls ``acks0_answer_dropped``.
        The request keeps its place until ``finish``: while its response is still
        arriving, local responses of later requests wait behind it, and it still counts
        as in flight.
        """
        skipped = 0
        for entry in self._entries:
            if not entry.to_upstream or entry.local is not None:
                continue
            if entry.correlation_id == correlation_id:
                if entry.expects_response:
                    break
                known = self.acks0_answered
                if known is False or (known is None and self._awaited_after(entry)):
                    # Not its answer; where order cannot tell, assume Kafka's behaviour.
                    skipped += 1
                    continue
                return entry
            if not entry.expects_response:
                skipped += 1
        else:
            return None
        if skipped:
            # A later request was answered first: this broker does not answer acks=0.
            self.acks0_answered = False
            self._forget_acks0(entry)
        return entry

    def _awaited_after(self, acks0: InFlightRequest) -> bool:
        """Whether the first awaited upstream request after ``acks0`` has its id.

        Only then can a response with that id answer either: were another awaited
        request first, the response could not be for the later one.
        """
        seen = False
        for entry in self._entries:
            if entry is acks0:
                seen = True
            elif seen and entry.expects_response and entry.to_upstream and entry.local is None:
                return entry.correlation_id == acks0.correlation_id
        return False

    def _forget_acks0(self, before: InFlightRequest) -> None:
        """Drop the acks=0 entries ahead of ``before`` (their answers will not come)."""
        kept: deque[InFlightRequest] = deque()
        entries = self._entries
        while entries:
            entry = entries.popleft()
            if entry is before:
                entries.appendleft(entry)
                break
            if entry.expects_response:
                kept.append(entry)
            else:
                self._optional -= 1
        entries.extendleft(reversed(kept))

    def acks0_answer_dropped(self, entry: InFlightRequest) -> None:
        """``entry`` (acks=0) was answered by the broker; its answer went nowhere."""
        self.acks0_answered = True
        self._entries.remove(entry)
        self._optional -= 1

    def finish(self, entry: InFlightRequest) -> list[bytes]:
        """``entry``'s upstream response has wholly gone out; return the local
        responses that may follow it now."""
        entries = self._entries
        if entries and entries[0] is entry:
            entries.popleft()
        else:
            with contextlib.suppress(ValueError):  # finished already
                entries.remove(entry)
        self.stats.response(entry)
        if self.observer is not None:
            self.observer(entry)
        return self.release_ready() if self._local_pending else []

    def answer_locally(self, entry: InFlightRequest, frame: bytes) -> list[bytes]:
        """Attach a gateway-made response; return the frames that may go out now."""
        entry.local = frame
        entry.response_bytes = len(frame)
        self._local_pending += 1
        return self.release_ready()

    def release_ready(self) -> list[bytes]:
        """Pop local responses that no longer wait behind an upstream response.

        acks=0 entries do not hold them back: no response will be sent for those.
        """
        ready: list[bytes] = []
        entries = self._entries
        i = 0
        while self._local_pending and i < len(entries):
            first = entries[i]
            if first.local is None:
                if first.expects_response:
                    break
                i += 1
                continue
            del entries[i]
            self._local_pending -= 1
            ready.append(first.local)
            self.stats.response(first)
            if self.observer is not None:
                self.observer(first)
        return ready

    @property
    def has_local_pending(self) -> bool:
        return self._local_pending > 0


@dataclass(frozen=True, slots=True)
class RequestFrame:
    """A whole request an interceptor asked for. ``frame`` includes the length prefix.

    ``request`` is its in-flight entry, taken when the frame was read so that its place
    in the response order is where the client sent it (an interceptor answers through
    ``InFlight.answer_locally``).
    """

    header: RequestHeader
    frame: bytes
    request: InFlightRequest = field(compare=False)


@dataclass(frozen=True, slots=True)
class ResponseFrame:
    """A whole response an interceptor asked for, with the request it answers."""

    request: InFlightRequest
    frame: bytes | bytearray


@dataclass(frozen=True, slots=True)
class ResponseTail:
    """The top-level tagged section of a response whose earlier bytes already went out.

    The frame's length prefix went out too, so whatever replaces ``tail`` must have
    exactly its length.
    """

    request: InFlightRequest
    tail: bytes


@dataclass(frozen=True, slots=True)
class ResponseHead:
    """The start of a response, length prefix included, up to the end of the part its
    ``HeadFinder`` looked for; nothing of the frame went out yet, the rest follows as
    buffers.

    Whatever replaces ``head`` must start with the frame's new length prefix: the old
    size plus the difference in length between the new head and ``head``.
    """

    request: InFlightRequest
    head: bytes


@dataclass(frozen=True, slots=True)
class UnreadableResponse:
    """A streamed response whose fields could not be followed; it went out untouched."""

    request: InFlightRequest
    detail: str


@dataclass(frozen=True, slots=True)
class DroppedResponse:
    """An upstream response nobody awaits. ``acks0`` is set when it answers an acks=0
    produce (Tansu does that; Kafka sends nothing), which is expected, not a fault."""

    correlation_id: int
    size: int
    acks0: bool = False


@dataclass(frozen=True, slots=True)
class ProtocolViolation:
    """The stream cannot be followed any further; the connection must close.

    ``reason`` is a short, bounded metric label (oversize_frame, malformed_frame);
    ``detail`` is for the log line.
    """

    reason: str
    detail: str


Item = (
    bytes
    | memoryview
    | RequestFrame
    | ResponseFrame
    | ResponseTail
    | ResponseHead
    | UnreadableResponse
    | DroppedResponse
    | ProtocolViolation
)

# Decides whether a request must be gathered whole and handed to an interceptor.
# Called with (api_key, api_version); must be cheap, it runs for every request.
RequestPolicy = Callable[[int, int], bool]
# For an intercepted response (request, frame size): a TailFinder to stream it and gather
# only its top-level tagged section, a HeadFinder to hold back only its head and stream
# the rest, or None to gather it whole.
TailPolicy = Callable[[InFlightRequest, int], TailFinder | HeadFinder | None]


class _Reader:
    """Shared frame state machine: forward, gather or discard the current frame."""

    __slots__ = (
        "_drop",
        "_failed",
        "_gather",
        "_gather_left",
        "_gather_meta",
        "_head",
        "_max",
        "_pass",
        "_walk",
    )

    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._pass = 0  # bytes of the current frame still to forward untouched
        self._drop = 0  # bytes of the current frame still to discard
        self._gather: bytearray | None = None  # the current frame, gathered whole
        self._gather_left = 0
        self._gather_meta: object = None
        self._head = b""  # start of a frame whose first bytes are not all here yet
        # Follows a frame streaming through up to its tagged section (responses only).
        self._walk: TailFinder | HeadFinder | None = None
        self._failed = False

    @property
    def buffered(self) -> int:
        """Bytes of a partial frame held here (counted against queued_max_request_bytes)."""
        gather = self._gather
        return (0 if gather is None else len(gather)) + len(self._head)

    @property
    def mid_frame(self) -> bool:
        """True while a frame has started but not ended (e.g. a client aborting mid-request)."""
        return bool(
            self._pass
            or self._drop
            or self._gather is not None
            or self._head
            or self._walk is not None
        )

    def feed(self, data: bytes) -> list[Item]:
        out: list[Item] = []
        if self._failed or not data:
            return out
        n = len(data)
        # Fast path: the chunk belongs entirely to a frame being forwarded.
        if self._pass:
            if self._pass >= n:
                self._pass -= n
                out.append(data)
                if not self._pass:
                    self._frame_done(out)
                return out
            mv = memoryview(data)
            out.append(mv[: self._pass])
            pos = self._pass
            self._pass = 0
            self._frame_done(out)
        else:
            mv = memoryview(data)
            pos = 0
            if self._drop:
                pos = min(self._drop, n)
                self._drop -= pos
            elif self._gather is not None:
                take = min(self._gather_left, n)
                self._gather += mv[:take]
                self._gather_left -= take
                pos = take
                if not self._gather_left:
                    self._emit_gathered(out)
                    if self._failed:
                        return out
            elif self._walk is not None:
                pos = self._walk_on(mv, 0, n, out)
            elif self._head:
                data = self._head + data
                self._head = b""
                mv = memoryview(data)
                n = len(data)
        if pos < n:
            self._split(data, mv, pos, out)
        return out

    def _split(self, data: bytes, mv: memoryview, pos: int, out: list[Item]) -> None:
        raise NotImplementedError

    def _frame_done(self, out: list[Item]) -> None:
        """Hook run when a forwarded frame has fully gone out."""

    def _emit_gathered(self, out: list[Item]) -> None:
        raise NotImplementedError

    def _walk_on(self, mv: memoryview, pos: int, n: int, out: list[Item]) -> int:
        raise NotImplementedError

    def _fail(self, out: list[Item], reason: str, detail: str) -> None:
        self._failed = True
        out.append(ProtocolViolation(reason, detail))

    def _size_problem(self, size: int, minimum: int) -> tuple[str, str] | None:
        """(reason, detail) when a frame's size field rules it out, else None."""
        if size > self._max:
            return "oversize_frame", f"frame of {size} bytes exceeds max_frame_bytes={self._max}"
        if size < minimum:
            return "malformed_frame", f"frame of {size} bytes is shorter than a header"
        return None

    def _start_gather(
        self, mv: memoryview, pos: int, end: int, n: int, meta: object, out: list[Item]
    ) -> int:
        """Gather the frame at ``pos``; return the position after what was consumed."""
        self._gather_meta = meta
        if end <= n:
            self._gather = bytearray(mv[pos:end])
            self._gather_left = 0
            self._emit_gathered(out)
            return end
        self._gather = bytearray(mv[pos:n])
        self._gather_left = end - n
        return n


class RequestReader(_Reader):
    """Client → upstream. Records every request that expects a response."""

    __slots__ = ("_inflight", "_intercept", "frames", "held")

    def __init__(
        self,
        inflight: InFlight,
        intercept: RequestPolicy | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        super().__init__(max_frame_bytes)
        self._inflight = inflight
        self._intercept = intercept
        self.frames = 0  # request frames seen, for the connection registry
        # Client bytes are held while a SaslHandshake v0 exchange waits for the broker
        # (see gateway.protocol._sasl); the I/O layer then calls ``resume()``.
        self.held = False

    def feed(self, data: bytes) -> list[Item]:
        # Fast path for the commonest chunk: one whole request that passes through,
        # starting at a frame boundary (what a client waiting for each answer sends).
        # Between two socket reads the CPU caches are cold, and the general state
        # machine's calls and memoryviews then cost more than the work itself: on a
        # small-request round trip this path saves about a third of the reader's time.
        n = len(data)
        if (
            n >= 12
            and not self._pass
            and not self._head
            and self._gather is None
            and not self._failed
            and not self._inflight.sasl.state
        ):
            size, key, version, correlation_id = _SIZE_KEY_VERSION_CORRELATION.unpack_from(data)
            if (
                size + 4 == n
                and 8 <= size <= self._max
                and key != PRODUCE  # acks=0 needs a look at the body
                and key != SASL_HANDSHAKE
                and (self._intercept is None or not self._intercept(key, version))
            ):
                self.frames += 1
                inflight = self._inflight
                requests = inflight.stats.requests
                requests[(key, version)] = requests.get((key, version), 0) + 1
                inflight.add(key, version, correlation_id).request_bytes = n
                return [data]
        return super().feed(data)

    def resume(self) -> list[Item]:
        """Take up held client bytes again, once the broker's side of the SASL exchange
        moved on (they may be held again if it is still not the client's turn)."""
        if not self.held or self._failed:
            return []
        self.held = False
        data, self._head = self._head, b""
        out: list[Item] = []
        self._split(data, memoryview(data), 0, out)
        return out

    def _split(self, data: bytes, mv: memoryview, pos: int, out: list[Item]) -> None:
        sasl = self._inflight.sasl
        n = len(data)
        while pos < n and not self._failed:
            if sasl.state:
                pos = self._split_sasl(data, mv, pos, out)
            else:
                pos = self._split_requests(data, mv, pos, out)

    def _split_requests(self, data: bytes, mv: memoryview, pos: int, out: list[Item]) -> int:
        """Kafka requests from ``pos``; return where a SASL exchange takes over, else n."""
        n = len(data)
        span = pos  # start of a run of whole pass-through frames, forwarded as one slice
        inflight = self._inflight
        intercept = self._intercept
        max_size = self._max
        requests = inflight.stats.requests
        while n - pos >= 12:
            size, key, version, correlation_id = _SIZE_KEY_VERSION_CORRELATION.unpack_from(mv, pos)
            if size > max_size or size < 8:  # inline: this loop runs once per request
                if span < pos:  # the whole frames before the bad one still go out
                    out.append(mv[span:pos])
                self._fail(out, *self._size_problem(size, 8))  # type: ignore[misc]
                return n
            end = pos + 4 + size
            if intercept is not None and intercept(key, version):
                self.frames += 1
                requests[(key, version)] = requests.get((key, version), 0) + 1
                if span < pos:
                    out.append(mv[span:pos])
                pos = span = self._start_gather(mv, pos, end, n, None, out)
                if self._failed or self._gather is not None:
                    return n
                continue
            if key == PRODUCE:
                try:
                    expects_response = produce_acks(mv[pos + 4 : min(end, n)], version) != 0
                except Incomplete:
                    if end <= n:
                        if span < pos:
                            out.append(mv[span:pos])
                        self._fail(out, "malformed_frame", "produce request ends before acks")
                        return n
                    break  # wait for the rest of the header
                except Malformed as exc:
                    if span < pos:
                        out.append(mv[span:pos])
                    self._fail(out, "malformed_frame", f"produce request: {exc}")
                    return n
            elif key == SASL_HANDSHAKE and version == 0:
                # Raw SASL tokens may follow: what comes next waits for the answer.
                try:
                    mechanism = handshake_mechanism(mv[pos + 4 : min(end, n)])
                except Incomplete:
                    if end <= n:
                        if span < pos:
                            out.append(mv[span:pos])
                        self._fail(out, "malformed_frame", "SaslHandshake ends before mechanism")
                        return n
                    break  # wait for the rest of the mechanism
                except Malformed as exc:
                    if span < pos:
                        out.append(mv[span:pos])
                    self._fail(out, "malformed_frame", f"SaslHandshake request: {exc}")
                    return n
                self.frames += 1
                requests[(key, version)] = requests.get((key, version), 0) + 1
                entry = inflight.add(key, version, correlation_id)
                entry.request_bytes = size + 4
                inflight.sasl.handshake_sent(entry, mechanism)
                if end > n:
                    self._pass = end - n
                    end = n
                out.append(mv[span:end])
                return end
            else:
                expects_response = True
            self.frames += 1  # counted here: a produce header may first wait for more bytes
            requests[(key, version)] = requests.get((key, version), 0) + 1
            if expects_response:
                inflight.add(key, version, correlation_id).request_bytes = size + 4
            else:
                inflight.add_acks0(key, version, correlation_id)
            if end > n:
                self._pass = end - n
                pos = n
                break
            pos = end
        if span < pos:
            # A chunk of whole frames goes out as the bytes object it came in: a
            # transport writes bytes without wrapping them in a view of its own.
            out.append(data if span == 0 and pos == n else mv[span:pos])
        if pos < n:
            self._head = bytes(mv[pos:])
        return n

    def _split_sasl(self, data: bytes, mv: memoryview, pos: int, out: list[Item]) -> int:
        """Raw SASL tokens from ``pos``; return where Kafka requests resume, else n."""
        n = len(data)
        span = pos
        sasl = self._inflight.sasl
        while n - pos >= 4:
            (size,) = INT32.unpack_from(mv, pos)
            if size > self._max or size < 0:
                if span < pos:
                    out.append(mv[span:pos])
                self._fail(out, *self._size_problem(size, 0))  # type: ignore[misc]
                return n
            end = pos + 4 + size
            verdict = sasl.client_frame(mv[pos + 4 : min(end, n)], end <= n)
            if verdict == _sasl.TOKEN:
                if end > n:
                    self._pass = end - n
                    pos = n
                    break
                pos = end
                continue
            if span < pos:
                out.append(mv[span:pos])
            span = pos
            if verdict == _sasl.REQUEST:
                return pos
            if verdict == _sasl.HOLD:
                if n - pos > _sasl.HOLD_LIMIT:
                    self._fail(
                        out,
                        "malformed_frame",
                        f"client sent {n - pos} bytes during a SASL exchange without "
                        "waiting for the broker",
                    )
                    return n
                self.held = True
            break  # HOLD, or MORE: wait for the rest of the frame's header
        if span < pos:
            out.append(mv[span:pos])
        if pos < n:
            self._head = bytes(mv[pos:])
        return n

    def _emit_gathered(self, out: list[Item]) -> None:
        frame = bytes(self._gather or b"")
        self._gather = None
        try:
            header = parse_request_header(memoryview(frame)[4:])
        except Malformed as exc:
            self._fail(out, "malformed_frame", f"request header: {exc}")
            return
        # Intercepted requests are answered by the gateway, never sent upstream.
        entry = self._inflight.add(
            header.api_key, header.api_version, header.correlation_id, to_upstream=False
        )
        entry.request_bytes = len(frame)
        out.append(RequestFrame(header, frame, entry))


class ResponseReader(_Reader):
    """Upstream → client. Matches responses to in-flight requests by order (see InFlight)."""

    __slots__ = (
        "_current",
        "_held",
        "_inflight",
        "_intercept",
        "_tail",
        "_tail_policy",
        "_walk_left",
    )

    def __init__(
        self,
        inflight: InFlight,
        intercept: Callable[[InFlightRequest], bool] | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        tail_policy: TailPolicy | None = None,
    ) -> None:
        super().__init__(max_frame_bytes)
        self._inflight = inflight
        self._intercept = intercept
        # Asked for each intercepted response whether to stream it (see TailPolicy).
        self._tail_policy = tail_policy
        self._current: InFlightRequest | None = None  # whose response is being forwarded
        self._walk_left = 0  # bytes of the streamed frame after what was walked
        self._tail = False  # the gather in progress is a streamed frame's tagged section
        # The head held back while a HeadFinder walks it; None when walked bytes stream.
        self._held: bytearray | None = None

    def feed(self, data: bytes) -> list[Item]:
        # Fast path for the commonest chunk: one whole response that passes through,
        # starting at a frame boundary, with no local response waiting behind it (see
        # RequestReader.feed for why).
        n = len(data)
        inflight = self._inflight
        if (
            n >= 8
            and not self._pass
            and not self._head
            and not self._drop
            and self._gather is None
            and self._walk is None
            and not self._failed
            and not inflight.sasl.state
            and not inflight.has_local_pending
        ):
            size, correlation_id = _SIZE_CORRELATION.unpack_from(data)
            if size + 4 == n and 4 <= size <= self._max:
                entry = inflight.match_upstream(correlation_id)
                if (
                    entry is not None
                    and entry.expects_response
                    and (self._intercept is None or not self._intercept(entry))
                ):
                    entry.response_bytes = n
                    inflight.finish(entry)  # nothing local waits: it returns []
                    return [data]
        return super().feed(data)

    def _frame_done(self, out: list[Item]) -> None:
        entry, self._current = self._current, None
        if entry is not None:
            out.extend(self._inflight.finish(entry))

    def _split(self, data: bytes, mv: memoryview, pos: int, out: list[Item]) -> None:
        sasl = self._inflight.sasl
        n = len(data)
        while pos < n and not self._failed:
            if sasl.state == _sasl.TOKENS:
                pos = self._split_tokens(data, mv, pos, out)
            else:
                pos = self._split_responses(data, mv, pos, out)

    def _split_responses(self, data: bytes, mv: memoryview, pos: int, out: list[Item]) -> int:
        """Kafka responses from ``pos``; return where raw SASL tokens start, else n."""
        n = len(data)
        span = pos
        inflight = self._inflight
        intercept = self._intercept
        max_size = self._max
        handshake = inflight.sasl.handshake  # a SaslHandshake v0 awaiting its answer
        while n - pos >= 8:
            size, correlation_id = _SIZE_CORRELATION.unpack_from(mv, pos)
            if size > max_size or size < 4:  # inline: this loop runs once per response
                if span < pos:  # the whole frames before the bad one still go out
                    out.append(mv[span:pos])
                self._fail(out, *self._size_problem(size, 4))  # type: ignore[misc]
                return n
            end = pos + 4 + size
            entry = inflight.match_upstream(correlation_id)
            acks0 = False
            if entry is not None and not entry.expects_response:
                inflight.acks0_answer_dropped(entry)
                entry, acks0 = None, True
            if entry is not None:
                entry.response_bytes = size + 4
                if entry is handshake:
                    if span < pos:
                        out.append(mv[span:pos])
                    return self._handshake_answered(mv, pos, end, n, entry, out)
            if entry is None or (intercept is not None and intercept(entry)):
                if span < pos:
                    out.append(mv[span:pos])
                if entry is None:
                    out.append(DroppedResponse(correlation_id, size, acks0))
                    if end > n:
                        self._drop = end - n
                        pos = span = n
                        break
                    pos = span = end
                    continue
                finder = self._tail_policy(entry, size) if self._tail_policy else None
                if finder is None:
                    pos = span = self._start_gather(mv, pos, end, n, entry, out)
                else:
                    pos = span = self._start_tail(mv, pos, end, n, entry, finder, out)
                if self._gather is not None or self._walk is not None or self._pass:
                    return n
                continue
            if end > n:
                self._pass = end - n
                self._current = entry
                pos = n
                break
            pos = end
            ready = inflight.finish(entry)
            if ready:
                out.append(mv[span:pos])
                span = pos
                out.extend(ready)
        if span < pos:
            out.append(data if span == 0 and pos == n else mv[span:pos])  # as for requests
        if pos < n:
            self._head = bytes(mv[pos:])
        return n

    def _start_tail(
        self,
        mv: memoryview,
        pos: int,
        end: int,
        n: int,
        entry: InFlightRequest,
        finder: TailFinder | HeadFinder,
        out: list[Item],
    ) -> int:
        """Stream the frame at ``pos`` (its size and correlation id are here) and gather
        only its top-level tagged section, or hold back only its head; return the
        position after what was consumed."""
        if finder.holds_head:
            self._held = bytearray(mv[pos : pos + 8])
        else:
            out.append(mv[pos : pos + 8])
        self._walk = finder
        self._walk_left = end - pos - 8
        self._current = entry
        return self._walk_on(mv, pos + 8, n, out)

    def _walk_on(self, mv: memoryview, pos: int, n: int, out: list[Item]) -> int:
        finder = self._walk
        assert finder is not None
        stop = min(n, pos + self._walk_left)
        try:
            reached = finder.feed(mv, pos, stop)
        except Malformed as exc:
            return self._unreadable(mv, pos, n, str(exc), out)
        if reached > pos:
            if self._held is not None:
                self._held += mv[pos:reached]
            else:
                out.append(mv[pos:reached])
            self._walk_left -= reached - pos
        if finder.found:
            self._walk = None
            if self._held is not None:
                return self._head_found(mv, reached, n, out)
            entry, self._current = self._current, None
            self._tail = True
            return self._start_gather(mv, reached, reached + self._walk_left, n, entry, out)
        if not self._walk_left:
            part = "its head" if self._held is not None else "its tagged fields"
            return self._unreadable(mv, reached, n, f"frame ends before {part}", out)
        return reached

    def _head_found(self, mv: memoryview, pos: int, n: int, out: list[Item]) -> int:
        """The held head ends at ``pos``: hand it out, then forward the rest of the frame
        as it arrives (``_frame_done`` finishes the entry when it ends in a later chunk)."""
        entry = self._current
        assert entry is not None and self._held is not None
        out.append(ResponseHead(entry, bytes(self._held)))
        self._held = None
        return self._forward_rest(mv, pos, n, entry, out)

    def _forward_rest(
        self, mv: memoryview, pos: int, n: int, entry: InFlightRequest, out: list[Item]
    ) -> int:
        """Forward the streamed frame's bytes from ``pos`` on, finishing ``entry`` once
        they all went out (here, or in ``_frame_done`` when the frame ends later)."""
        end = pos + self._walk_left
        if end > n:
            if pos < n:
                out.append(mv[pos:n])
            self._pass = end - n
            return n
        if end > pos:
            out.append(mv[pos:end])
        self._current = None
        out.extend(self._inflight.finish(entry))
        return end

    def _unreadable(self, mv: memoryview, pos: int, n: int, detail: str, out: list[Item]) -> int:
        """Forward the rest of a streamed frame from ``pos`` untouched.

        A held head cannot be forwarded so: its frame claims to be a response it cannot
        be (e.g. a brokers array running past the frame's end), and the bytes after it
        cannot be trusted to be the next response, so the connection closes.
        """
        entry = self._current
        assert entry is not None
        self._walk = None
        if self._held is not None:
            self._held = None
            self._fail(
                out,
                "malformed_frame",
                f"{api_name(entry.api_key)} v{entry.api_version} response "
                f"(correlation id {entry.correlation_id}): {detail}",
            )
            return n
        out.append(UnreadableResponse(entry, detail))
        return self._forward_rest(mv, pos, n, entry, out)

    def _handshake_answered(
        self, mv: memoryview, pos: int, end: int, n: int, entry: InFlightRequest, out: list[Item]
    ) -> int:
        """The response to a SaslHandshake v0 starts at ``pos``: read its error code (raw
        tokens follow if it is 0), then forward or gather the frame as any other."""
        if n - pos < 10:  # length, correlation id, error code
            if end <= n:
                self._fail(out, "malformed_frame", "SaslHandshake response ends before error code")
            else:
                self._head = bytes(mv[pos:])
            return n
        self._inflight.sasl.handshake_answered(INT16.unpack_from(mv, pos + 8)[0])
        if self._intercept is not None and self._intercept(entry):
            return self._start_gather(mv, pos, end, n, entry, out)
        if end > n:
            out.append(mv[pos:])
            self._pass = end - n
            self._current = entry
            return n
        out.append(mv[pos:end])
        out.extend(self._inflight.finish(entry))
        return end

    def _split_tokens(self, data: bytes, mv: memoryview, pos: int, out: list[Item]) -> int:
        """Raw SASL tokens from the broker; return where Kafka responses resume, else n."""
        n = len(data)
        span = pos
        sasl = self._inflight.sasl
        while n - pos >= 4:
            (size,) = INT32.unpack_from(mv, pos)
            if size > self._max or size < 0:
                if span < pos:
                    out.append(mv[span:pos])
                self._fail(out, *self._size_problem(size, 0))  # type: ignore[misc]
                return n
            end = pos + 4 + size
            sasl.server_frame(size)
            if end > n:
                self._pass = end - n  # _current stays None: no in-flight entry to finish
                pos = n
                break
            pos = end
            if not sasl.state:
                break
        if span < pos:
            out.append(mv[span:pos])
        if pos < n and sasl.state:
            self._head = bytes(mv[pos:])
            return n
        return pos

    def _emit_gathered(self, out: list[Item]) -> None:
        frame = self._gather or bytearray()  # handed over as is: no copy of a large frame
        entry = self._gather_meta
        self._gather = None
        self._gather_meta = None
        assert isinstance(entry, InFlightRequest)
        if self._tail:
            self._tail = False
            out.append(ResponseTail(entry, bytes(frame)))
        else:
            out.append(ResponseFrame(entry, frame))
        out.extend(self._inflight.finish(entry))
