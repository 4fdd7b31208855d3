"""Client → upstream: ``RequestReader`` splits the client's bytes into requests.

Every request that expects a response gets an in-flight entry; requests an interceptor
asked for (``RequestPolicy``) are gathered whole and handed out as ``RequestFrame``;
everything else is forwarded in the chunks it came in. After a successful SaslHandshake
v0 raw SASL tokens pass (rules in ``gateway.protocol._sasl``); client bytes sent out of
turn meanwhile are held: the I/O layer calls ``RequestReader.resume()`` when
``RequestReader.held`` is set after feeding broker bytes.
"""

from __future__ import annotations

import struct

from . import _sasl
from ._apis import PRODUCE, SASL_HANDSHAKE
from ._events import Item, RequestFrame, RequestPolicy
from ._framing import DEFAULT_MAX_FRAME_BYTES, FrameReader
from ._headers import parse_request_header, produce_acks
from ._inflight import InFlight
from ._sasl import handshake_mechanism
from ._scanner import PlainTable, scan_requests
from ._wire import INT32, Incomplete, Malformed

_SIZE_KEY_VERSION_CORRELATION = struct.Struct(">ihhi")


class RequestReader(FrameReader):
    """Client → upstream. Records every request that expects a response."""

    __slots__ = ("_frames", "_inflight", "_intercept", "held", "table")

    def __init__(
        self,
        inflight: InFlight,
        intercept: RequestPolicy | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        super().__init__(max_frame_bytes)
        self._inflight = inflight
        self._intercept = intercept
        self._frames = 0  # request frames read here (the scanner counts its own)
        # What the scanner may take (``PlainTable``); None: every frame is read here.
        self.table: PlainTable | None = None
        # Client bytes are held while a SaslHandshake v0 exchange waits for the broker
        # (see gateway.protocol._sasl); the I/O layer then calls ``resume()``.
        self.held = False

    @property
    def frames(self) -> int:
        """Request frames seen, the scanner's included (the connection registry)."""
        return self._frames + self._inflight.counts.frames

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
        """Kafka requests from ``pos``; return where a SASL exchange takes over, else n."""
        n = len(data)
        span = pos  # start of a run of whole pass-through frames, forwarded as one slice
        inflight = self._inflight
        intercept = self._intercept
        max_size = self._max
        stats = inflight.stats
        table = self.table
        while n - pos >= 12:
            if table is not None:  # plain frames after one read here
                pos += scan_requests(
                    data, pos, n, table, inflight.entries, inflight.counts, max_size
                )
                if n - pos < 12:
                    break
            size, key, version, correlation_id = _SIZE_KEY_VERSION_CORRELATION.unpack_from(mv, pos)
            if size > max_size or size < 8:  # inline: this loop runs once per request
                if span < pos:  # the whole frames before the bad one still go out
                    out.append(mv[span:pos])
                self._fail(out, *self._size_problem(size, 8))  # type: ignore[misc]
                return n
            end = pos + 4 + size
            if intercept is not None and intercept(key, version):
                self._frames += 1
                stats.count_request(key, version)
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
                self._frames += 1
                stats.count_request(key, version)
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
            self._frames += 1  # counted here: a produce header may first wait for more bytes
            stats.count_request(key, version)
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
