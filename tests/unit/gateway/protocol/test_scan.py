"""The scanner's two builds are the same functions: gateway/protocol/_scan.py and
_inflight_entry.py compiled, over the C tables (_tables.pyx), and the same files as
plain Python, over the tables' Python twins (_tables_py.py). Fed the
same bytes and tables, they take the same bytes, make the same entries, count the same
and leave the same.

test_lane.py (beside this file) holds whichever build runs to the readers alone, over
whole connections; this holds the two builds to each other, function by function.
"""

from __future__ import annotations

import random
import struct
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.features.report import NO_FEATURES
from gateway.interceptors import dispatch
from gateway.protocol import _scanner, _tables_py, frame
from gateway.protocol._hot import plain
from gateway.protocol._stats import ApiStats
from gateway.versions import gateway_supported
from tests.unit._connection import RecordingTransport, connected
from tests.unit._kafka import produce
from tests.unit.gateway.protocol.test_lane import KINDS, _answer

# The compiled scanner: its functions, its tables and its entry, as one namespace; and
# the same files as plain Python, over the tables' Python twins.
compiled = (
    SimpleNamespace(**{**vars(_scanner.entry), **vars(_scanner.tables), **vars(_scanner.scan)})
    if _scanner.COMPILED
    else None
)
plain_build = SimpleNamespace(
    **{**vars(plain("_inflight_entry")), **vars(_tables_py), **vars(plain("_scan"))}
)
MAX = 1 << 20


def _tables() -> tuple[Any, Any]:
    """The compiled and the twin PlainTable of one negotiation (as Gateway.negotiated)."""
    conn, _, _ = connected(RecordingTransport)
    passthrough = conn.gateway.negotiated(
        conn.upstream_address, gateway_supported(), NO_FEATURES
    ).passthrough
    args = (
        passthrough,
        dispatch.REWRITTEN_FROM,
        dispatch.lane_walks(passthrough),
        dispatch.lane_heads(passthrough),
        dispatch.LAST_HEADS,
        conn.gateway.router,
    )
    return compiled.PlainTable(*args), plain_build.PlainTable(*args)  # type: ignore[union-attr]


def _entries(entries: list[Any]) -> list[tuple[int, ...]]:
    return [
        (e.api_key, e.api_version, e.correlation_id, e.request_bytes, e.response_bytes)
        for e in entries
    ]


def _both_scan(stream: bytes) -> list[tuple[int, list[tuple[int, ...]]]]:
    """What the compiled scanner and its twin each take of the whole ``stream``: how far
    they read, and their entries."""
    sides = []
    for module, table in zip((compiled, plain_build), _tables(), strict=True):
        entries: list[Any] = []
        counts = module.Counts()  # type: ignore[union-attr]
        taken = module.scan_requests(stream, 0, len(stream), table, entries, counts, MAX)  # type: ignore[union-attr]
        sides.append((taken, _entries(entries)))
    return sides


def _folded(counts: Any) -> tuple[object, ...]:
    stats = ApiStats()
    counts.fold(stats)
    return (
        stats.requests,
        stats.responses,
        {key: sum(histogram[1:]) for key, histogram in stats.latency.items()},
        counts.frames,
    )


@pytest.mark.skipif(not _scanner.COMPILED, reason="the scanner is not compiled")
@pytest.mark.parametrize("seed", range(150))
def test_the_compiled_scanner_and_its_twin_take_the_same(seed: int) -> None:
    rng = random.Random(seed)
    reqs = [rng.choice(KINDS)(i + 1) for i in range(rng.randint(1, 30))]
    stream = b"".join(r.frame for r in reqs)
    start = rng.choice([0, 0, rng.randrange(len(stream))])  # mostly at a boundary
    end = rng.choice([len(stream), rng.randrange(start, len(stream) + 1)])
    tables = _tables()
    sides = []
    for module, table in zip((compiled, plain_build), tables, strict=True):
        entries: list[Any] = []
        counts = module.Counts()  # type: ignore[union-attr]
        taken = module.scan_requests(stream, start, end, table, entries, counts, MAX)  # type: ignore[union-attr]
        sides.append((module, table, entries, counts, taken))
    assert sides[0][4] == sides[1][4]
    assert _entries(sides[0][2]) == _entries(sides[1][2])
    by_id = {r.correlation_id: r for r in reqs}
    # A scan that starts inside a frame may read what follows as a request of its own (a
    # Produce v0 is 20 bytes of anything): it gets an answer too, with its id.
    answers = b"".join(
        _answer(by_id[e.correlation_id])
        if e.correlation_id in by_id
        else frame(struct.pack(">i", e.correlation_id) + b"any")
        for e in sides[0][2]
    )
    if rng.random() < 0.2:  # an answer to no request, between two answers
        ends = [0]
        while ends[-1] < len(answers):
            ends.append(ends[-1] + 4 + struct.unpack_from(">i", answers, ends[-1])[0])
        at = rng.choice(ends)
        answers = answers[:at] + frame(struct.pack(">i", 77_777) + b"stray") + answers[at:]
    stop = rng.choice([len(answers), rng.randrange(len(answers) + 1)])
    results = []
    for module, table, entries, counts, _ in sides:
        pieces: list[bytes] = []
        done: list[Any] = []
        taken = module.match_responses(answers, 0, stop, table, entries, counts, MAX, pieces, done)  # type: ignore[union-attr]
        results.append((taken, pieces, _entries(done), _entries(entries), _folded(counts)))
    assert results[0] == results[1]


@pytest.mark.skipif(not _scanner.COMPILED, reason="the scanner is not compiled")
def test_the_twin_makes_the_same_kind_of_entry() -> None:
    """Both builds of the entry (``_inflight_entry.py`` compiled, and as plain Python)
    carry the same attributes with the same defaults."""
    assert compiled.InFlightRequest is not plain_build.InFlightRequest  # type: ignore[union-attr]
    made = [module.InFlightRequest(3, 12, 7) for module in (compiled, plain_build)]  # type: ignore[union-attr]
    for name in plain_build.InFlightRequest.__slots__:
        if name != "started":
            assert getattr(made[0], name) == getattr(made[1], name), name


@pytest.mark.skipif(not _scanner.COMPILED, reason="the scanner is not compiled")
@pytest.mark.parametrize("version", [0, 1, 2])
def test_acks_of_produce_v0_to_2_are_read_alike(version: int) -> None:
    """Kafka 3.9 takes Produce v0-2 (KIP-896 removed them in 4.0): no transactional_id,
    acks right after the header. Both scanners take acks=1 and leave acks=0."""

    def old_produce(correlation_id: int, acks: int) -> bytes:
        header = struct.pack(">hhih", 0, version, correlation_id, 4) + b"prod"
        return frame(header + struct.pack(">hii", acks, 1500, 0))  # no topics

    stream = b"".join(old_produce(i, i % 2) for i in (1, 3, 4))
    sides = _both_scan(stream)
    assert sides[0] == sides[1]
    assert [entry[2] for entry in sides[0][1]] == [1, 3]  # the acks=0 one stops the scan


@pytest.mark.skipif(not _scanner.COMPILED, reason="the scanner is not compiled")
@pytest.mark.parametrize("version", [3, 9, 11])
def test_acks_past_a_long_transactional_id_are_read_alike(version: int) -> None:
    """Both read acks in place, however far past the request's first bytes it lies."""
    stream = b"".join(
        produce(version, i, acks=i % 2, transactional_id="t" * 600).frame for i in (1, 3, 4)
    )
    sides = _both_scan(stream)
    assert sides[0] == sides[1] and len(sides[0][1]) == 2
