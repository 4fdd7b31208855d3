"""The frame state machine both readers share: forward, gather or discard a frame.

A frame nobody asked for is never copied: the reader looks at its first bytes and
forwards the chunks the socket delivered (even a 100 MiB fetch). Only intercepted frames
are gathered whole. Subclasses split whole frames out of a chunk (``_split``) and say
what a gathered frame becomes (``_emit_gathered``).
"""

from __future__ import annotations

from ._events import Item, ProtocolViolation
from ._finders import HeadFinder, TailFinder

# Kafka's default socket.request.max.bytes (100 MiB): a frame larger than this closes
# the connection on a real broker too.
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


class FrameReader:
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
        "side",
    )

    def __init__(self, max_frame_bytes: int, side: str = "") -> None:
        self._max = max_frame_bytes
        self.side = side  # whose stream, as its violations name it: "client", "upstream"
        self._pass = 0  # bytes of the current frame still to forward untouched
        self._drop = 0  # bytes of the current frame still to discard
        # The current frame, gathered whole (or the bytes read, when they are the frame).
        self._gather: bytearray | bytes | None = None
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

    def discard(self) -> None:
        """The connection closed: drop the partial frame held here and take no more
        bytes. A closed connection's objects may outlive it by minutes (they sit in
        reference cycles, which only a full pass of the cyclic garbage collector frees,
        and a gateway runs one rarely), so what they hold must go now: a gathered frame
        may be up to max_frame_bytes (docs/memory.md)."""
        self._failed = True
        self._gather = None
        self._gather_meta = None
        self._gather_left = self._pass = self._drop = 0
        self._head = b""
        self._walk = None

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
        out.append(ProtocolViolation(reason, detail, self.side))

    def _start_gather(
        self, mv: memoryview, pos: int, end: int, n: int, meta: object, out: list[Item]
    ) -> int:
        """Gather the frame at ``pos``; return the position after what was consumed."""
        self._gather_meta = meta
        if end <= n:
            # A frame that is the whole read is handed over as the bytes read, no copy.
            whole = pos == 0 and end == n and isinstance(mv.obj, bytes)
            self._gather = mv.obj if whole else bytearray(mv[pos:end])  # type: ignore[assignment]
            self._gather_left = 0
            self._emit_gathered(out)
            return end
        self._gather = bytearray(mv[pos:n])
        self._gather_left = end - n
        return n
