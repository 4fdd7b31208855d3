"""Client → upstream: ``RequestReader`` splits the client's bytes into requests.

Every request that expects a response gets an in-flight entry; requests an interceptor
asked for (``RequestPolicy``) are gathered whole and handed out as ``RequestFrame``;
everything else is forwarded in the chunks it came in. After a successful SaslHandshake
v0 raw SASL tokens pass (rules in ``gateway.protocol._sasl``); client bytes sent out of
turn meanwhile are held: the I/O layer calls ``RequestReader.resume()`` when
``RequestReader.held`` is set after feeding broker bytes.
"""

from __future__ import annotations

from . import _sasl
from ._entry import InFlightRequest
from ._events import Item, RequestFrame, RequestPolicy
from ._framing import DEFAULT_MAX_FRAME_BYTES, FrameReader
from ._headers import parse_request_header, produce_acks
from ._inflight import InFlight
from ._rules import (
    DONE,
    INTERCEPTED,
    REQUEST_HEAD,
    REQUEST_HEAD_BYTES,
    TOKENS,
    UNREADABLE,
    FrameError,
    take_requests,
    token_end,
)
from ._sasl import handshake_mechanism
from ._scanner import PlainTable, scan_requests
from ._wire import Incomplete, Malformed


class RequestReader(FrameReader):
    """Client → upstream. Records every request that expects a response."""

    __slots__ = ("_inflight", "_intercept", "held", "table")

    def __init__(
        self,
        inflight: InFlight,
        intercept: RequestPolicy | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        super().__init__(max_frame_bytes, "client")
        self._inflight = inflight
        self._intercept = intercept
        # What the scanner may take (``PlainTable``); None: every frame is read here.
        self.table: PlainTable | None = None
        # Client bytes are held while a SaslHandshake v0 exchange waits for the broker
        # (see gateway.protocol._sasl); the I/O layer then calls ``resume()``.
        self.held = False

    @property
    def frames(self) -> int:
        """Request frames seen, the scanner's and the readers' (the connection
        registry): both count in the in-flight table's ``counts``."""
        return self._inflight.counts.frames

    def feed(self, data: bytes) -> list[Item]:
        # The scanner first, on a read that starts at a frame boundary: what it takes
        # goes out as it came; the rest of the read is split here.
        table = self.table
        if (
            table is None
            or self._pass
            or self._head
            or self._gather is not None
            or self._failed
            or self._inflight.sasl.state
        ):
            return super().feed(data)
        n = len(data)
        inflight = self._inflight
        taken = scan_requests(data, 0, n, table, inflight.entries, inflight.counts, self._max)
        if taken == n:
            return [data]
        mv = memoryview(data)
        out: list[Item] = [mv[:taken]] if taken else []
        self._split(data, mv, taken, out)
        return out

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
        """Kafka requests from ``pos``; return where a SASL exchange takes over, else n.

        The scanner takes the plain frames (``table``); the rules' loop
        (``_rules.take_requests``, over the scanner's rules) the others nobody intercepts, acks=0
        produces included (``InFlight.add_acks0``); here is only the frame where it
        stops, and why: intercepted, a SaslHandshake v0, acks not here yet, or an error
        that closes the connection."""
        n = len(data)
        span = pos  # start of a run of whole pass-through frames, forwarded as one slice
        inflight = self._inflight
        entries = inflight.entries
        counts = inflight.counts
        intercept = self._intercept
        max_size = self._max
        table = self.table
        # After the scanner, the loop takes one frame: the scanner may take the next.
        most = -1 if table is None else 1
        add_acks0 = inflight.add_acks0
        while n - pos >= REQUEST_HEAD_BYTES:
            if table is not None:  # plain frames after one read here
                pos += scan_requests(data, pos, n, table, entries, counts, max_size)
            try:
                pos, why = take_requests(
                    data, pos, n, intercept, InFlightRequest, entries, counts, max_size, most,
                    False, add_acks0,
                )  # fmt: skip
            except FrameError as exc:
                if span < exc.at:  # the whole frames before the bad one still go out
                    out.append(mv[span : exc.at])
                self._fail(out, exc.reason, exc.detail)
                return n
            if pos >= n:  # its last frame may not be all here: the rest passes as it comes
                pos = self._past(pos, n)
                break
            if why == DONE:
                continue
            size, _key, version, _id = REQUEST_HEAD.unpack_from(mv, pos)
            end = pos + 4 + size
            if why == INTERCEPTED:  # counted; its entry once gathered (_emit_gathered)
                if span < pos:
                    out.append(mv[span:pos])
                pos = span = self._start_gather(mv, pos, end, n, None, out)
                if self._failed or self._gather is not None:
                    return n
                continue
            if why == TOKENS:
                # A login starts; after v0, raw SASL tokens may follow: what comes next
                # waits for the answer.
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
                take_requests(
                    data, pos, n, None, InFlightRequest, entries, counts, max_size, 1, True,
                )  # fmt: skip
                if version != 0:  # v1: its tokens come in SaslAuthenticate requests
                    inflight.sasl.begin_login(mechanism)
                    pos = self._past(end, n)
                    continue
                inflight.sasl.handshake_sent(entries[-1], mechanism)
                end = self._past(end, n)
                out.append(mv[span:end])
                return end
            if why == UNREADABLE:
                detail = "produce request ends before acks"
                try:  # read again, for the reason
                    produce_acks(mv[pos + 4 : min(end, n)], version)
                except Malformed as exc:
                    detail = f"produce request: {exc}"
                except Incomplete:
                    pass
                if span < pos:
                    out.append(mv[span:pos])
                self._fail(out, "malformed_frame", detail)
                return n
            break  # PARTIAL: wait for the rest of the header
        if span < pos:
            # A chunk of whole frames goes out as the bytes object it came in: a
            # transport writes bytes without wrapping them in a view of its own.
            out.append(data if span == 0 and pos == n else mv[span:pos])
        if pos < n:
            self._head = bytes(mv[pos:])
        return n

    def _past(self, end: int, n: int) -> int:
        """Where reading resumes after a frame passed through whole that ends at ``end``:
        there, or, for one that runs past this read's ``n`` bytes, at ``n``, with the rest
        of it to pass through as it comes (``_pass``)."""
        if end > n:
            self._pass = end - n
            return n
        return end

    def _split_sasl(self, data: bytes, mv: memoryview, pos: int, out: list[Item]) -> int:
        """Raw SASL tokens from ``pos``; return where Kafka requests resume, else n."""
        n = len(data)
        span = pos
        sasl = self._inflight.sasl
        while n - pos >= 4:
            try:
                end = token_end(mv, pos, self._max)
            except FrameError as exc:
                if span < pos:
                    out.append(mv[span:pos])
                self._fail(out, exc.reason, exc.detail)
                return n
            verdict = sasl.client_frame(mv[pos + 4 : min(end, n)], end <= n)
            if verdict == _sasl.TOKEN:
                pos = self._past(end, n)
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
