"""The compiled scanner's tables (``_tables.pyx``) in Python: the table of what the
scanner takes (``PlainTable``) and its counts (``Counts``), with the same methods the
scanner calls (``_takes``, ``_forwarded``, ``_walk_of``, ``_headed``, ``_last_head``),
for the scanner's plain build (``_scan.py`` as plain Python, ``_scanner``): what runs
where the scanner was not compiled (no C compiler at install time), or with
``KAFKA_GATEWAY_PURE_PYTHON=1``. tests/unit/gateway/protocol/test_scan.py holds the two
builds equal on the same inputs. The C tables keep C arrays and C counts these cannot
be the same source as; the rule both tables apply is one (``_scan.scanner_takes_key``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._hot import plain, scanner_takes_key
from ._stats import LATENCY_BUCKETS, ApiStats

COMPILED = False

__all__ = ["COMPILED", "LATENCY_BUCKETS", "Counts", "PlainTable"]

# The keys a PlainTable covers (as the compiled one's, _tables.pxd).
_KEYS = 128
_WALK_VERSIONS = 64
_NONE = (1, 0)  # the versions of a key the table has none of


class PlainTable:
    """The compiled ``PlainTable``: what the scanner takes (see ``_scan.py``)."""

    __slots__ = ("_forwards", "_heads", "_programs", "_runs", "_walks", "book", "heads")

    def __init__(
        self,
        passthrough: Mapping[int, tuple[int, int]],
        first_rewritten: Mapping[int, int],
        walks: Mapping[tuple[int, int], tuple[int, ...]],
        headed: Mapping[int, tuple[int, int]],
        heads: dict[Any, Any],
        book: object,
    ) -> None:
        def usable(key: int) -> bool:
            return 0 <= key < _KEYS and scanner_takes_key(key)

        self._forwards = {
            key: (low, min(high, first_rewritten.get(key, 1 << 15) - 1))
            for key, (low, high) in passthrough.items()
            if usable(key)
        }
        self._heads = {key: (low, high) for key, (low, high) in headed.items() if usable(key)}
        walked: dict[int, tuple[int, int]] = {}
        for key, version in sorted(walks):
            if not (usable(key) and 0 <= version < _WALK_VERSIONS):
                continue
            if key not in walked:
                walked[key] = (version, version)
            elif version == walked[key][1] + 1:  # the first run of versions only
                walked[key] = (walked[key][0], version)
        self._walks = walked
        self._programs = walks
        # Per key, the versions of the three kinds together, as runs: what ``_takes``
        # asks of every request, in one look.
        spans: dict[int, list[tuple[int, int]]] = {}
        for kind in (self._forwards, walked, self._heads):
            for key, (low, high) in kind.items():
                if low <= high:
                    spans.setdefault(key, []).append((low, high))
        self._runs = {key: _runs(runs) for key, runs in spans.items()}
        self.heads = heads
        self.book = book

    def plain(self, key: int, version: int) -> bool:
        """Whether the scanner takes requests of this key and version."""
        return self._takes(key, version)

    def walked(self, key: int, version: int) -> bool:
        return self._walk_of(key, version) is not None

    def headed(self, key: int, version: int) -> bool:
        return self._headed(key, version)

    def _takes(self, key: int, version: int) -> bool:
        return any(low <= version <= high for low, high in self._runs.get(key, ()))

    def _forwarded(self, key: int, version: int) -> bool:
        low, high = self._forwards.get(key, _NONE)
        return low <= version <= high

    def _walk_of(self, key: int, version: int) -> tuple[int, ...] | None:
        low, high = self._walks.get(key, _NONE)
        return self._programs[key, version] if low <= version <= high else None

    def _headed(self, key: int, version: int) -> bool:
        low, high = self._heads.get(key, _NONE)
        return low <= version <= high

    def _last_head(self, key: int, version: int, buf: bytes, pos: int, end: int) -> Any:
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


# The in-flight entry as plain Python (``_inflight_entry.py``; the compiled tables' is
# the same file compiled).
InFlightRequest = plain("_inflight_entry").InFlightRequest
