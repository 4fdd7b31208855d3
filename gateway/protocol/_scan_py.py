"""The scanner's Python twin: the functions of ``gateway/protocol/_scan.pyx`` and the
types of ``_tables.pyx``, with the same signatures and the same contract (read
``_scan.pyx``'s docstring), in Python.

What runs where the scanner was not compiled (no C compiler at install time), or with
``KAFKA_GATEWAY_PURE_PYTHON=1`` in the environment (``gateway.protocol._scanner``).
tests/unit/gateway/protocol/test_scan.py holds the two equal on the same inputs.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from time import perf_counter
from typing import Any

from ._headers import produce_acks
from ._stats import LATENCY_BUCKETS, ApiStats
from ._walk import tags_offset
from ._wire import Incomplete, Malformed, skip_tagged_fields

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

# The keys a PlainTable covers (as the compiled one's).
_KEYS = 128
_WALK_VERSIONS = 64
_PRODUCE, _SASL_HANDSHAKE = 0, 17
_SIZE_KEY_VERSION_CORRELATION = struct.Struct(">ihhi")
_SIZE_CORRELATION = struct.Struct(">ii")


class InFlightRequest:
    """A request whose response is awaited (or, when ``local`` is set, already made).

    ``request_bytes``/``response_bytes``: frame sizes, length prefix included (the
    request log). ``local``: a response the gateway made, released once every earlier
    upstream response went out. ``context``: an interceptor's note until the response.
    ``to_upstream`` False: answered here, never matched to an upstream response;
    ``expects_response`` False: an acks=0 produce, kept to recognise a broker that
    answers it (see ``InFlight``)."""

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
        self.request_bytes = 0
        self.response_bytes = 0
        self.local: bytes | None = None
        self.context: object = None
        self.to_upstream = to_upstream
        self.expects_response = expects_response


def tail_offset(key: int, version: int, program: object, body: bytes) -> int:
    """Where the walk of ``body`` ends, or -1 (``tags_offset``, which the compiled
    scanner's C walk is held to)."""
    try:
        return tags_offset(key, version, body)
    except (Incomplete, Malformed):
        return -1


def _tail_empty(key: int, version: int, buf: bytes, pos: int, end: int) -> bool:
    """Whether the response from ``pos`` (after its correlation id) to ``end`` has an
    empty top-level tagged section, its last byte."""
    body = memoryview(buf)[:end]
    try:
        pos = tags_offset(key, version, body, skip_tagged_fields(body, pos))
    except (Incomplete, Malformed):
        return False
    return pos == end - 1 and buf[pos] == 0


class PlainTable:
    """The compiled ``PlainTable``: what the scanner takes (see ``_scan.pyx``)."""

    __slots__ = ("_forwarded", "_headed", "_walked", "book", "heads")

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
            return 0 <= key < _KEYS and key != _SASL_HANDSHAKE

        self._forwarded = {
            key: (low, min(high, first_rewritten.get(key, 1 << 15) - 1))
            for key, (low, high) in passthrough.items()
            if usable(key)
        }
        self._headed = {key: (low, high) for key, (low, high) in headed.items() if usable(key)}
        walked: dict[int, tuple[int, int]] = {}
        for key, version in sorted(walks):
            if not (usable(key) and 0 <= version < _WALK_VERSIONS):
                continue
            if key not in walked:
                walked[key] = (version, version)
            elif version == walked[key][1] + 1:  # the first run of versions only
                walked[key] = (walked[key][0], version)
        self._walked = walked
        self.heads = heads
        self.book = book

    def plain(self, key: int, version: int) -> bool:
        return (
            self.forwarded(key, version) or self.walked(key, version) or self.headed(key, version)
        )

    def forwarded(self, key: int, version: int) -> bool:
        low, high = self._forwarded.get(key, (1, 0))
        return low <= version <= high

    def walked(self, key: int, version: int) -> bool:
        low, high = self._walked.get(key, (1, 0))
        return low <= version <= high

    def headed(self, key: int, version: int) -> bool:
        low, high = self._headed.get(key, (1, 0))
        return low <= version <= high

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


class Counts:
    """What the scanner counted since the last ``fold`` (see the compiled ``Counts``)."""

    __slots__ = ("_stats", "frames")

    def __init__(self) -> None:
        self._stats = ApiStats()
        self.frames = 0  # requests taken, ever (the connection registry's count)

    def request(self, key: int, version: int) -> None:
        self._stats.count_request(key, version)
        self.frames += 1

    def response(self, key: int, version: int, elapsed: float) -> None:
        self._stats.count_response(key, version, elapsed)

    def fold(self, stats: ApiStats) -> None:
        """Add the counts to ``stats`` and start from none."""
        stats.merge(self._stats.take())


def scan_requests(
    buf: bytes,
    start: int,
    end: int,
    table: PlainTable,
    entries: list[InFlightRequest],
    counts: Counts,
    max_frame_bytes: int,
) -> int:
    """Take the plain whole requests of ``buf[start:end]``; return the bytes taken."""
    pos = start
    end = min(end, len(buf))
    now = perf_counter()
    while end - pos >= 12:
        size, key, version, correlation_id = _SIZE_KEY_VERSION_CORRELATION.unpack_from(buf, pos)
        stop = pos + 4 + size
        if size < 8 or size > max_frame_bytes or stop > end or not table.plain(key, version):
            break
        if key == _PRODUCE:
            try:
                if produce_acks(buf[pos + 4 : stop], version) == 0:
                    break
            except (Incomplete, Malformed):
                break
        entry = InFlightRequest(key, version, correlation_id)
        entry.started = now
        entry.request_bytes = stop - pos
        entries.append(entry)
        counts.request(key, version)
        pos = stop
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
    plain entries; return the bytes taken."""
    if not entries:
        return 0
    pos = written = start
    end = min(end, len(buf))
    now = perf_counter()
    answered, count = 0, len(entries)
    while end - pos >= 8 and answered < count:
        size, correlation_id = _SIZE_CORRELATION.unpack_from(buf, pos)
        stop = pos + 4 + size
        if size < 4 or size > max_frame_bytes or stop > end:
            break
        entry = entries[answered]
        if (
            not entry.to_upstream
            or not entry.expects_response
            or entry.context is not None
            or entry.local is not None
            or correlation_id != entry.correlation_id
            or _releases_local(entries, answered + 1)
        ):
            break
        key, version = entry.api_key, entry.api_version
        if not table.forwarded(key, version):
            if table.walked(key, version):
                if not _tail_empty(key, version, buf, pos + 8, stop):
                    break
            elif table.headed(key, version):
                head = table.last_head(key, version, buf, pos, stop)
                if head is None:
                    break
                written = _replace_head(head, buf, pos, written, pieces)
            else:
                break
        entry.response_bytes = stop - pos
        counts.response(key, version, now - entry.started)
        answered += 1
        if done is not None:
            done.append(entry)
        pos = stop
    if answered:
        del entries[:answered]
    if written > start and pos > written:
        pieces.append(buf[written:pos])
    return pos - start


def _releases_local(entries: list[InFlightRequest], after: int) -> bool:
    """Whether answering the entry before ``after`` lets a local answer behind it go
    out (only acks=0 produces between them, which get no answer)."""
    for entry in entries[after:]:
        if entry.local is not None:
            return True
        if entry.expects_response:
            return False
    return False


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
