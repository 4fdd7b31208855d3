"""Following a response streaming past, chunk by chunk, to where a walk of its schema
ends: to its top-level tagged section (``TailFinder``) or to the end of a head
(``HeadFinder``).

Each chunk goes through ``_walk.walk``, the loop that also walks bodies held whole, so a
streamed response is walked by the same steps as a gathered one. Why chunk by chunk: a
100 MiB Fetch must never be gathered, and a 100k-partition Metadata response only needs
its head (its brokers) held back. Between chunks a finder keeps what the walk stopped
on: the few bytes of a read split across them (at most a tag's number and size), or how
far a skip runs into the next.
"""

from __future__ import annotations

from functools import cache

from ._apis import response_schema as codec_schema
from ._walk import Frame, Program, _program, after_header, begin, layout, response_schema, walk

# Bytes of a chunk joined to those kept from the last one: at least the longest read a
# step makes (a tagged field's number and size: two uvarints of up to 5 bytes).
_JOIN = 16


class _Finder:
    """Follows a response streaming past, fed from just after its correlation id, until
    its walk ends; ``feed`` consumes what lies before that point and stops there,
    setting ``found``. Only the few bytes of a read split across chunks are copied;
    record bytes are stepped over."""

    __slots__ = ("_frame", "_kept", "_over", "found")
    # True when the bytes walked over must be held back (the reader then gathers them),
    # False when they stream through as they are walked.
    holds_head = False

    def __init__(self, program: Program) -> None:
        self._frame: Frame = begin(program)  # where the walk resumes
        self._kept = b""  # the start of a read split across chunks
        self._over = 0  # how far a skip runs past the bytes fed so far
        self.found = False

    def feed(self, mv: memoryview, pos: int, end: int) -> int:
        """Consume ``mv[pos:end]`` up to where the walk ends; return the position reached.

        Raises ``Malformed`` when the bytes cannot be this response.
        """
        over = self._over
        if over:
            if over > end - pos:
                self._over = over - (end - pos)
                return end
            pos += over
            self._over = 0
        stopped: list[Frame] = []
        kept = self._kept
        if kept:
            # The read split across chunks: walk the kept bytes and the next few, then
            # go on in the chunk itself from where that walk stopped.
            joined = kept + mv[pos : min(end, pos + _JOIN)]
            reached = walk(self._frame, joined, 0, len(joined), stopped)
            if not stopped:
                self.found = True
                return pos + reached - len(kept)
            self._frame = stopped.pop()
            if reached < len(kept):  # the chunk, shorter than _JOIN, ends first
                self._kept = joined[reached:]
                return end
            self._kept = b""
            pos += reached - len(kept)
        reached = walk(self._frame, mv, pos, end, stopped)
        if not stopped:
            self.found = True
            return reached
        self._frame = stopped.pop()
        if reached > end:
            self._over = reached - end
        elif reached < end:
            self._kept = bytes(mv[reached:end])
        return end


@cache
def _tail_program(api_key: int, version: int) -> Program:
    # Response header v1 (after the correlation id), then the body to its tagged section.
    return after_header(_program(response_schema(api_key, version)))


class TailFinder(_Finder):
    """Follows a flexible response streaming past until its top-level tagged section."""

    __slots__ = ()

    def __init__(self, api_key: int, version: int) -> None:
        super().__init__(_tail_program(api_key, version))


@cache
def _head_program(api_key: int, version: int, name: str) -> Program:
    schema = codec_schema(api_key, version)
    if not any(f.name == name and (f.array or f.entity) for f in layout(schema)[0]):
        raise ValueError(f"{schema.__name__} has no array or struct field {name!r}")
    program = _program(schema, name, False, True)
    return after_header(program) if program[0] else program


class HeadFinder(_Finder):
    """Follows a response (flexible or not) until the end of its top-level array or
    struct field ``name``: the "head" that the reader holds back while the rest streams.

    Why: a Metadata response names every broker in its ``brokers`` array, which comes
    before the topics and partitions (its bulk) in every version. Only the head needs
    rewriting, so only the head is held; its size grows with brokers, not partitions.
    Assumes a response header v1 exactly when the body is flexible, which holds for
    every API this is used for (not for ApiVersions).
    """

    __slots__ = ("_key", "_walked")
    holds_head = True

    def __init__(self, api_key: int, version: int, name: str) -> None:
        # The walk starts at the first ``feed``, and only if the head is not the last one.
        self._key = (api_key, version, name)
        self._walked: bytearray | None = None
        self._kept = b""
        self._over = 0
        self.found = False

    def feed(self, mv: memoryview, pos: int, end: int) -> int:
        walked = self._walked
        if walked is None:
            key = self._key
            last = _last_heads.get(key)
            if last is not None and end - pos >= len(last) and mv[pos : pos + len(last)] == last:
                # The walk reads nothing beyond the head and decides each step from the
                # bytes read so far: the same bytes lead it to the same end.
                self.found = True
                return pos + len(last)
            self._frame = begin(_head_program(*key))
            walked = self._walked = bytearray()
        reached = super().feed(mv, pos, end)
        walked += mv[pos:reached]
        if self.found:
            _last_heads[self._key] = bytes(walked)
        return reached


# The last head found per (api key, version, field), from just after the correlation id:
# a cluster's brokers rarely change, so most Metadata responses start with the same
# bytes, and one comparison then replaces a walk through every broker (~3 µs for three
# brokers). One entry per version: bounded.
_last_heads: dict[tuple[int, int, str], bytes] = {}
