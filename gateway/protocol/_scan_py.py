"""The scanner's Python twin: the functions of ``gateway/protocol/_scan.pyx`` and the
types of ``_tables.pyx``, with the same signatures and the same contract (read
``_scan.pyx``'s docstring), in Python. Its rules are the compiled scanner's own source
(``_hotpath``, run as plain Python), and its loops the readers' (``_rules``).

What runs where the scanner was not compiled (no C compiler at install time), or with
``KAFKA_GATEWAY_PURE_PYTHON=1`` in the environment (``gateway.protocol._scanner``).
tests/unit/gateway/protocol/test_scan.py holds the two equal on the same inputs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Any

from ._hot import plain, scanner_takes_key, tail_empty, walk
from ._rules import FrameError, take_requests, take_responses
from ._stats import LATENCY_BUCKETS, ApiStats

COMPILED = False

__all__ = [
    "COMPILED",
    "LATENCY_BUCKETS",
    "Counts",
    "InFlightRequest",
    "PlainTable",
    "match_responses",
    "scan_requests",
    "tail_offset",
]

# The in-flight entry, ``_inflight_entry.py`` as plain Python (the compiled scanner's is
# the same file compiled).
InFlightRequest = plain("_inflight_entry").InFlightRequest
# The keys a PlainTable covers (as the compiled one's).
_KEYS = 128
_WALK_VERSIONS = 64
_NONE = (1, 0)  # the versions of a key the table has none of


def tail_offset(key: int, version: int, program: tuple[int, ...], body: bytes) -> int:
    """Where the walk of ``body``, a response body of ``key``/``version`` whose walk is
    ``program`` (``tail_program``), ends, or -1 (the tests hold it to ``tags_offset``)."""
    return walk(program, 0, body, 0, len(body))


class PlainTable:
    """The compiled ``PlainTable``: what the scanner takes (see ``_scan.pyx``)."""

    __slots__ = ("_forwarded", "_headed", "_plain", "_programs", "_walked", "book", "heads")

    def __init__(
        self,
        passthrough: Mapping[int, tuple[int, int]],
        first_rewritten: Mapping[int, int],
        walks: Mapping[tuple[int, int], object],
        headed: Mapping[int, tuple[int, int]],
        heads: dict[Any, Any],
        book: object,
    ) -> None:
        def usable(key: int) -> bool:
            return 0 <= key < _KEYS and scanner_takes_key(key)

        self._forwarded = {
            key: (low, min(high, first_rewritten.get(key, 1 << 15) - 1))
            for key, (low, high) in passthrough.items()
            if usable(key)
        }
        self._headed = {key: (low, high) for key, (low, high) in headed.items() if usable(key)}
        walked: dict[int, tuple[int, int]] = {}
        self._programs = walks
        for key, version in sorted(walks):
            if not (usable(key) and 0 <= version < _WALK_VERSIONS):
                continue
            if key not in walked:
                walked[key] = (version, version)
            elif version == walked[key][1] + 1:  # the first run of versions only
                walked[key] = (walked[key][0], version)
        self._walked = walked
        # Per key, the versions of the three kinds together, as runs: what ``plain``
        # asks of every request, in one look.
        plain: dict[int, list[tuple[int, int]]] = {}
        for kind in (self._forwarded, walked, self._headed):
            for key, (low, high) in kind.items():
                if low <= high:
                    plain.setdefault(key, []).append((low, high))
        self._plain = {key: _runs(spans) for key, spans in plain.items()}
        self.heads = heads
        self.book = book

    def plain(self, key: int, version: int) -> bool:
        """Whether the scanner takes requests of this key and version."""
        return any(low <= version <= high for low, high in self._plain.get(key, ()))

    def forwarded(self, key: int, version: int) -> bool:
        low, high = self._forwarded.get(key, _NONE)
        return low <= version <= high

    def walked(self, key: int, version: int) -> bool:
        low, high = self._walked.get(key, _NONE)
        return low <= version <= high

    def headed(self, key: int, version: int) -> bool:
        low, high = self._headed.get(key, _NONE)
        return low <= version <= high

    def take(
        self,
        entry: InFlightRequest,
        buf: bytes,
        pos: int,
        stop: int,
        written: int,
        pieces: list[bytes],
    ) -> int:
        """Whether the scanner takes the answer ``buf[pos:stop]`` to ``entry``, whose
        version is not forwarded (``_rules.take_responses`` asked that first): -1 for
        no, else up to where ``buf`` is in ``pieces`` (``written`` before), where a
        headed answer's new start went."""
        key, version = entry.api_key, entry.api_version  # not forwarded (the loop asked)
        low, high = self._walked.get(key, _NONE)
        if low <= version <= high:
            program = self._programs[key, version]
            return written if tail_empty(program, buf, pos + 8, stop) else -1
        low, high = self._headed.get(key, _NONE)
        if low <= version <= high:
            head = self.last_head(key, version, buf, pos, stop)
            return -1 if head is None else _replace_head(head, buf, pos, written, pieces)
        return -1

    def last_head(self, key: int, version: int, buf: bytes, pos: int, end: int) -> Any:
        """The head last rewritten for (key, version) if the frame at ``pos`` starts with
        it after its correlation id and it holds for the book now; else None."""
        head = self.heads.get((key, version))
        if head is None:
            return None
        book = head[2]
        if book is not self.book or book.generation != head[3]:
            return None
        original: bytes = head[0]
        if end - pos - 8 < len(original) or buf[pos + 8 : pos + 8 + len(original)] != original:
            return None
        return head


def _runs(spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """``spans`` of versions merged where they overlap or touch."""
    runs: list[tuple[int, int]] = []
    for low, high in sorted(spans):
        if runs and low <= runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], max(runs[-1][1], high))
        else:
            runs.append((low, high))
    return tuple(runs)


class Counts:
    """What the scanner counted since the last ``fold`` (see the compiled ``Counts``).

    ``request(key, version)`` and ``response(key, version, elapsed)`` are the
    ``ApiStats``'s own methods, bound: a count costs one call, as in C."""

    __slots__ = ("_folded", "_stats", "request", "response")

    def __init__(self) -> None:
        self._stats = ApiStats()
        self._folded = 0  # requests counted before the last fold
        self.request: Callable[[int, int], None] = self._stats.count_request
        self.response: Callable[[int, int, float], None] = self._stats.count_response

    @property
    def frames(self) -> int:
        """Requests counted, ever (the connection registry's count)."""
        return self._folded + sum(self._stats.requests.values())

    def fold(self, stats: ApiStats) -> None:
        """Add the counts to ``stats`` and start from none."""
        taken = self._stats.take()
        self._folded += sum(taken.requests.values())
        stats.merge(taken)


def scan_requests(
    buf: bytes,
    start: int,
    end: int,
    table: PlainTable,
    entries: list[InFlightRequest],
    counts: Counts,
    max_frame_bytes: int,
) -> int:
    """Take the plain whole requests of ``buf[start:end]``; return the bytes taken.
    The loop and its rules are ``_rules.take_requests``, under this table."""
    try:
        pos, _ = take_requests(
            buf,
            start,
            end if end < len(buf) else len(buf),
            table._plain.get,
            None,
            InFlightRequest,
            entries,
            counts,
            max_frame_bytes,
        )
    except FrameError as exc:  # the scanner never fails: the reader will
        pos = exc.at
    return pos - start


def match_responses(
    buf: bytes,
    start: int,
    end: int,
    table: PlainTable,
    entries: list[InFlightRequest],
    counts: Counts,
    max_frame_bytes: int,
    pieces: list[bytes],
    done: list[Any] | None,
) -> int:
    """Take the whole responses of ``buf[start:end]`` that answer the table's oldest
    plain entries; return the bytes taken. The loop and its rules are
    ``_rules.take_responses``, under this table (``PlainTable.take``)."""
    if not entries:
        return 0
    try:
        pos, _ = take_responses(
            buf,
            start,
            end if end < len(buf) else len(buf),
            table._forwarded.get,
            table.take,
            None,
            perf_counter(),
            entries,
            counts,
            max_frame_bytes,
            pieces,
            done,
        )
    except FrameError as exc:
        pos = exc.at
    return pos - start


def _replace_head(head: Any, buf: bytes, pos: int, written: int, pieces: list[bytes]) -> int:
    """Put in ``pieces`` what comes before the response at ``pos`` since ``written`` and
    its new start; return up to where ``buf`` is now in ``pieces``."""
    original: bytes = head[0]
    rewritten: bytes = head[1]
    if rewritten is original:
        return written
    (size,) = struct.unpack_from(">i", buf, pos)
    if pos > written:
        pieces.append(buf[written:pos])
    new_size = (size + len(rewritten) - len(original)) & 0xFFFFFFFF
    pieces.append(struct.pack(">I", new_size) + buf[pos + 4 : pos + 8] + rewritten)
    return pos + 8 + len(original)
