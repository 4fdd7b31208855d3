"""The readers' loops (gateway/protocol/_rules.py): where they stop and why, and what
they leave in the table and the counts. Whole connections through them are
test_streams.py's and test_lane.py's, which hold the scanner to them too."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from gateway.protocol import _rules
from gateway.protocol._inflight import InFlight
from gateway.protocol._scanner import InFlightRequest
from tests.unit._kafka import produce

MAX = 1 << 20


def _take(data: bytes, **policy: Any) -> tuple[int, int, InFlight]:
    inflight = InFlight()
    pos, why = _rules.take_requests(
        data,
        0,
        len(data),
        policy.get("intercept"),
        InFlightRequest,
        inflight.entries,
        inflight.counts,
        MAX,
        policy.get("most", -1),
        False,
        policy.get("unanswered"),
    )
    return pos, why, inflight


@pytest.mark.parametrize("tid", [None, "t" * 40, "t" * 600])  # acks past the copied start
@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_acks_is_read_wherever_it_lies(tid: str | None, version: int) -> None:
    awaited = produce(version, 1, acks=1, transactional_id=tid).frame
    unanswered = produce(version, 2, acks=0, transactional_id=tid).frame
    pos, why, inflight = _take(awaited + unanswered)
    assert (pos, why) == (len(awaited), _rules.UNANSWERED)
    assert [e.correlation_id for e in inflight.entries] == [1]
    assert inflight.entries[0].request_bytes == len(awaited)
    kept: list[tuple[int, ...]] = []
    pos, why, inflight = _take(awaited + unanswered, unanswered=lambda *args: kept.append(args))
    assert (pos, why) == (len(awaited + unanswered), _rules.DONE)
    assert kept == [(0, version, 2, len(unanswered))]
    # Cut before acks: wait for the rest; after it: the acks=0 produce is known.
    for cut, expected in ((20, _rules.PARTIAL), (len(unanswered) - 10, _rules.UNANSWERED)):
        pos, why, inflight = _take(awaited + unanswered[:cut])
        assert (pos, why) == (len(awaited), expected), cut
    # A partial frame whose acks is here is taken: its end, past what is here, returned.
    pos, why, inflight = _take(awaited[:-10])
    assert (pos, why) == (len(awaited), _rules.DONE) and len(inflight.entries) == 1


def test_a_produce_that_ends_before_acks_is_unreadable() -> None:
    frame = produce(3, 1, acks=1, transactional_id="t" * 600).frame
    cut = frame[:300]  # inside the transactional id, the size said so
    short = struct.pack(">i", len(cut) - 4) + cut[4:]
    pos, why, inflight = _take(short)
    assert (pos, why) == (0, _rules.UNREADABLE) and not inflight.entries


@pytest.mark.parametrize(
    ("size", "reason"),
    [(7, "malformed_frame"), (MAX + 1, "oversize_frame"), (-1, "malformed_frame")],
)
def test_a_size_out_of_bounds_raises_where_its_frame_starts(size: int, reason: str) -> None:
    good = produce(3, 1, acks=1, transactional_id=None).frame
    bad = struct.pack(">ihhi", size, 18, 0, 2)
    with pytest.raises(_rules.FrameError) as raised:
        _take(good + bad)
    assert (raised.value.reason, raised.value.at) == (reason, len(good))
    responses = struct.pack(">ii", 4, 1) + struct.pack(">ii", 3 if size == 7 else size, 2)
    inflight = InFlight()
    inflight.entries.append(InFlightRequest(18, 0, 1))
    with pytest.raises(_rules.FrameError) as raised:
        _rules.take_responses(
            responses, 0, len(responses), None, 0.0, inflight.entries, inflight.counts, MAX,
            None,
        )  # fmt: skip
    assert raised.value.at == 8 and not inflight.entries  # the answer before it was taken


def test_intercepted_requests_are_counted_and_left() -> None:
    frame = produce(3, 1, acks=1, transactional_id=None).frame
    pos, why, inflight = _take(frame, intercept=lambda key, version: key == 0)
    assert (pos, why) == (0, _rules.INTERCEPTED) and not inflight.entries
    assert inflight.counts.frames == 1


def test_most_bounds_what_a_loop_takes() -> None:
    frames = b"".join(produce(3, i, acks=1, transactional_id=None).frame for i in range(3))
    pos, why, inflight = _take(frames, most=1)
    assert why == _rules.DONE and [e.correlation_id for e in inflight.entries] == [0]
    assert pos == len(frames) // 3
