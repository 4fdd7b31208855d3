"""Following a response streaming past, chunk by chunk, to where a walk of its schema
ends (``gateway.protocol._walk``'s generator steps): to its top-level tagged section
(``TailFinder``) or to the end of a head (``HeadFinder``)."""

from __future__ import annotations

from kio.index import load_response_schema

from ._walk import Walk, fields, response_schema, tagged_section, through_field


def _frame_walk(schema: type) -> Walk:
    yield from tagged_section()  # response header v1, after the correlation id
    yield from fields(schema)


class _Finder:
    """Follows a response streaming past, fed from just after its correlation id, until
    its ``walk`` ends; ``feed`` consumes what lies before that point and stops there,
    setting ``found``. Only the few bytes of a field split across chunks are copied;
    record bytes are stepped over."""

    __slots__ = ("_partial", "_step", "_walk", "found")
    # True when the bytes walked over must be held back (the reader then gathers them),
    # False when they stream through as they are walked.
    holds_head = False

    def __init__(self, walk: Walk) -> None:
        self._walk = walk
        self._partial = bytearray()  # the start of a field split across chunks
        self.found = False
        self._step = next(self._walk)

    def feed(self, mv: memoryview, pos: int, end: int) -> int:
        """Consume ``mv[pos:end]`` up to where the walk ends; return the position reached.

        Raises ``Malformed`` when the bytes cannot be this response.
        """
        walk = self._walk
        step = self._step
        try:
            while pos < end:
                if step < 0:
                    take = min(-step, end - pos)
                    pos += take
                    step += take
                    if step:
                        break
                    step = walk.send(None)
                elif self._partial:
                    partial = self._partial
                    take = min(step - len(partial), end - pos)
                    partial += mv[pos : pos + take]
                    pos += take
                    if len(partial) < step:
                        break
                    data = bytes(partial)
                    partial.clear()
                    step = walk.send(data)
                elif end - pos >= step:
                    data = mv[pos : pos + step]
                    pos += step
                    step = walk.send(data)
                else:
                    self._partial += mv[pos:end]
                    pos = end
        except StopIteration:
            self.found = True
        self._step = step
        return pos


class TailFinder(_Finder):
    """Follows a flexible response streaming past until its top-level tagged section."""

    __slots__ = ()

    def __init__(self, api_key: int, version: int) -> None:
        super().__init__(_frame_walk(response_schema(api_key, version)))


def _head_walk(schema: type, name: str) -> Walk:
    if schema.__flexible__:  # type: ignore[attr-defined]
        yield from tagged_section()  # response header v1, after the correlation id
    yield from through_field(schema, name)


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
        self._partial = bytearray()
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
            api_key, version, name = key
            self._walk = _head_walk(load_response_schema(api_key, version), name)
            self._step = next(self._walk)
            walked = self._walked = bytearray()
        reached = super().feed(mv, pos, end)
        walked += mv[pos:reached]
        if self.found:
            _last_heads[self._key] = bytes(walked)
        return reached


# The last head found per (api key, version, field), from just after the correlation id:
# a cluster's brokers rarely change, so most Metadata responses start with the same
# bytes, and one comparison then replaces a walk through every broker (a chain of
# generators, ~20 µs for three brokers). One entry per version: bounded.
_last_heads: dict[tuple[int, int, str], bytes] = {}
