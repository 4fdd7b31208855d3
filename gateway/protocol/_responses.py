"""Upstream → client: ``ResponseReader`` matches the broker's bytes to requests.

Responses nobody intercepts are forwarded in the chunks they came in. Intercepted ones
are gathered whole, except responses whose only rewritable part is their top-level
tagged section (KIP-951's NodeEndpoints in a Fetch): those stream through and only that
section is gathered (``ResponseTail``); and responses whose rewritable part is a "head"
before their bulk (the brokers of a Metadata response, before its topics): only the
head is held back (``ResponseHead``, length prefix included) and the rest streams
through behind it. After a successful SaslHandshake v0 the broker's raw SASL tokens pass
untouched (``gateway.protocol._sasl``).
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter

from . import _sasl
from ._apis import api_name
from ._entry import InFlightRequest
from ._events import (
    DroppedResponse,
    Item,
    ResponseFrame,
    ResponseHead,
    ResponseTail,
    TailPolicy,
    UnreadableResponse,
)
from ._finders import HeadFinder, TailFinder
from ._framing import DEFAULT_MAX_FRAME_BYTES, FrameReader
from ._inflight import InFlight
from ._rules import (
    DONE,
    RESPONSE_HEAD,
    RESPONSE_HEAD_BYTES,
    FrameError,
    take_responses,
    token_end,
)
from ._scanner import PlainTable, match_responses
from ._wire import INT16, Malformed


def _tell(observer: Callable[[InFlightRequest], None], done: list[InFlightRequest]) -> None:
    """Show ``InFlight.observer`` the answers taken (called only when there are some)."""
    for answered in done:
        observer(answered)


class ResponseReader(FrameReader):
    """Upstream → client. Matches responses to in-flight requests by order (see InFlight)."""

    __slots__ = (
        "_current",
        "_held",
        "_inflight",
        "_intercept",
        "_tail",
        "_tail_policy",
        "_walk_left",
        "table",
    )

    def __init__(
        self,
        inflight: InFlight,
        intercept: Callable[[InFlightRequest], bool] | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        tail_policy: TailPolicy | None = None,
    ) -> None:
        super().__init__(max_frame_bytes, "upstream")
        self._inflight = inflight
        self._intercept = intercept
        # Asked for each intercepted response whether to stream it (see TailPolicy).
        self._tail_policy = tail_policy
        self._current: InFlightRequest | None = None  # whose response is being forwarded
        self._walk_left = 0  # bytes of the streamed frame after what was walked
        self._tail = False  # the gather in progress is a streamed frame's tagged section
        # The head held back while a HeadFinder walks it; None when walked bytes stream.
        self._held: bytearray | None = None
        # What the scanner may take (``PlainTable``); None: every frame is read here.
        self.table: PlainTable | None = None

    def discard(self) -> None:
        super().discard()
        self._held = self._current = None
        self._tail = False
        self._walk_left = 0

    def feed(self, data: bytes) -> list[Item]:
        # The scanner first, on a read from a frame boundary: what it takes goes out as it
        # came (or as the pieces of a replaced head); the rest of the read is split here.
        if (
            self.table is None
            or self._pass
            or self._head
            or self._drop
            or self._gather is not None
            or self._walk is not None
            or self._failed
            or self._inflight.sasl.state
        ):
            return super().feed(data)
        n = len(data)
        out: list[Item] = []
        taken = self._scan(data, 0, n, out)
        if taken == n:
            return out if out else [data]
        mv = memoryview(data)
        if taken and not out:
            out.append(mv[:taken])
        self._split(data, mv, taken, out)
        return out

    def _scan(self, data: bytes, pos: int, n: int, pieces: list[Item]) -> int:
        """The scanner's match from ``pos``; return the bytes it took. Where it replaced
        a head, what it took is in ``pieces``; else they are ``data[pos:]``'s."""
        inflight = self._inflight
        observer = inflight.observer
        done: list[InFlightRequest] | None = None if observer is None else []
        taken: int = match_responses(
            data, pos, n, self.table, inflight.entries, inflight.counts, self._max, pieces, done
        )
        if done:
            _tell(observer, done)  # type: ignore[arg-type]
        return taken

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
        """Kafka responses from ``pos``; return where raw SASL tokens start, else n.

        The scanner takes the plain answers (``table``); the rules' loop
        (``_rules.take_responses``, over the scanner's rules) the others nobody intercepts that
        answer the oldest entries in order; here is only the frame where it stops (the
        in-flight table's ``match_upstream`` and ``finish`` apply the same rules):
        answers to acks=0 produces and to nothing, intercepted and streamed answers,
        the SaslHandshake v0 answer, answers that release local ones, frames not all
        here yet, and the errors that close the connection."""
        n = len(data)
        span = pos
        inflight = self._inflight
        entries = inflight.entries
        counts = inflight.counts
        observer = inflight.observer
        intercept = self._intercept
        max_size = self._max
        handshake = inflight.sasl.handshake  # a SaslHandshake v0 awaiting its answer
        if handshake is not None:  # its answer is the reader's (_handshake_answered)
            others = intercept
            intercept = lambda e: e is handshake or (others is not None and others(e))  # noqa: E731
        scanning = self.table is not None and not inflight.sasl.state
        # After the scanner, the loop takes one answer: the scanner may take the next.
        most = 1 if scanning else -1
        now = perf_counter()
        while n - pos >= RESPONSE_HEAD_BYTES:
            if scanning:  # plain frames after one read here
                pieces: list[Item] = []
                taken = self._scan(data, pos, n, pieces)
                if pieces:
                    if span < pos:
                        out.append(mv[span:pos])
                    out.extend(pieces)
                    span = pos + taken
                pos += taken
            done: list[InFlightRequest] | None = None if observer is None else []
            try:
                pos, why = take_responses(
                    data, pos, n, intercept, now, entries, counts, max_size, done, most,
                )  # fmt: skip
            except FrameError as exc:
                if done:
                    _tell(observer, done)  # type: ignore[arg-type]
                if span < exc.at:  # the whole frames before the bad one still go out
                    out.append(mv[span : exc.at])
                self._fail(out, exc.reason, exc.detail)
                return n
            if done:
                _tell(observer, done)  # type: ignore[arg-type]
            if why == DONE:
                continue
            size, correlation_id = RESPONSE_HEAD.unpack_from(mv, pos)  # within bounds
            end = pos + 4 + size
            entry = inflight.match_upstream(correlation_id)
            acks0 = False
            if entry is not None and not entry.expects_response:
                inflight.acks0_answer_dropped(entry)
                entry, acks0 = None, True
            if entry is not None:
                entry.response_bytes = end - pos
                if entry is handshake:
                    if span < pos:
                        out.append(mv[span:pos])
                    return self._handshake_answered(mv, pos, end, n, entry, out)
            if entry is None or (intercept is not None and intercept(entry)):
                if span < pos:
                    out.append(mv[span:pos])
                if entry is None:
                    out.append(DroppedResponse(correlation_id, end - pos - 4, acks0))
                    if end > n:
                        self._drop = end - n
                        pos = span = n
                        break
                    pos = span = end
                    continue
                finder = self._tail_policy(entry, end - pos - 4) if self._tail_policy else None
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
            what = f"{api_name(entry.api_key)} v{entry.api_version} response"
            self._fail(
                out, "malformed_frame", f"{what} (correlation id {entry.correlation_id}): {detail}"
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
            try:
                end = token_end(mv, pos, self._max)
            except FrameError as exc:
                if span < pos:
                    out.append(mv[span:pos])
                self._fail(out, exc.reason, exc.detail)
                return n
            sasl.server_frame(end - pos - 4)
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
