"""Large Fetch responses stream through; only their top-level tagged section is held back.

Covers the schema walk (``tags_offset``, ``TailFinder``) on kio-encoded responses cut at
every byte, the ``ResponseReader`` streaming mode, and the same-length NodeEndpoints
rewrite (``rewrite_tail(keep_length=True)``) with its padding and its fallback.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from gateway.interceptors.addresses import PAD_TAGS, rewrite_tail
from gateway.protocol import (
    Incomplete,
    InFlight,
    Malformed,
    ResponseFrame,
    ResponseReader,
    ResponseTail,
    TailFinder,
    UnreadableResponse,
    read_tagged_fields,
)
from gateway.protocol._tagged import strip_unknown_tags
from gateway.protocol._walk import tags_offset
from tests.unit._kafka import (
    RECORDS,
    build,
    decode,
    encode,
    frame,
    schema_module,
    tagged_section,
    top_level,
    uvarint,
)
from tests.unit.gateway.protocol.test_streams import (
    byte_by_byte,
    forwarded,
    metadata_response,
    normalize,
    two_pieces,
)

FETCH = 1


class Book:
    """Node N → a gateway host of ``host_len`` characters, port 19000+N."""

    generation = 0  # its answers never change

    def __init__(self, host_len: int = 4) -> None:
        self.host_len = host_len

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        return ("g" * self.host_len)[: self.host_len], 19000 + node_id


def fetch_body(version: int, endpoints: list[dict[str, Any]], records: bytes = RECORDS) -> Any:
    """A kio Fetch response with two topics, aborted transactions and partition tags."""
    cls = top_level(schema_module("fetch", version, "response"))
    partition = {
        "partition_index": 0,
        "high_watermark": 42,
        "records": records,
        "aborted_transactions": [{"producer_id": 7, "first_offset": 3}],
    }
    moved: dict[str, Any] = {
        "partition_index": 1,
        "error_code": ErrorCode.not_leader_or_follower,
        "records": None,
    }
    if version >= 12:
        moved["current_leader"] = {"leader_id": 2, "leader_epoch": 5}
    topic_key: dict[str, Any] = (
        {"topic_id": uuid.UUID(int=9)} if version >= 13 else {"topic": "orders"}
    )
    return build(
        cls,
        responses=[
            {**topic_key, "partitions": [partition, moved]},
            {**topic_key, "partitions": [{**partition, "partition_index": 2}]},
        ],
        **({"node_endpoints": endpoints} if version >= 16 else {}),
    )


def response_frame(correlation_id: int, body: bytes) -> bytes:
    return frame(struct.pack(">i", correlation_id) + tagged_section() + body)


ENDPOINTS = [
    {"node_id": 1, "host": "broker-1.internal", "port": 9093, "rack": "r1"},
    {"node_id": 2, "host": "broker-2.internal", "port": 9094},
]
FLEXIBLE_FETCH = range(12, 18)


# -- the walk --------------------------------------------------------------------------


@pytest.mark.parametrize("version", FLEXIBLE_FETCH)
def test_tags_offset_is_where_the_top_level_tags_start(version: int) -> None:
    # Independent of the walk: the same response with no tags ends in one 0 byte (an
    # empty section), so everything before it is the non-tagged part.
    without = encode(fetch_body(version, []))
    assert without.endswith(b"\x00")
    body = encode(fetch_body(version, ENDPOINTS))
    assert tags_offset(FETCH, version, body) == len(without) - 1
    assert body[: len(without) - 1] == without[:-1]


def test_tags_offset_needs_the_whole_non_tagged_part() -> None:
    body = encode(fetch_body(17, ENDPOINTS))
    offset = tags_offset(FETCH, 17, body)
    for cut in range(offset):
        with pytest.raises(Incomplete):
            tags_offset(FETCH, 17, body[:cut])


def _find(pieces: list[bytes], version: int) -> tuple[int, bool]:
    """Feed pieces of a frame (from after its correlation id); (bytes consumed, found)."""
    finder = TailFinder(FETCH, version)
    consumed = 0
    for piece in pieces:
        mv = memoryview(piece)
        reached = finder.feed(mv, 0, len(piece))
        consumed += reached
        if finder.found:
            break
        assert reached == len(piece)
    return consumed, finder.found


@pytest.mark.parametrize("version", [12, 16, 17])
def test_tail_finder_stops_at_the_tags_at_every_cut(version: int) -> None:
    body = encode(fetch_body(version, ENDPOINTS))
    after_id = tagged_section() + body  # header tags, then the body
    expected = 1 + tags_offset(FETCH, version, body)
    for cut, pieces in two_pieces(after_id):
        assert _find(pieces, version) == (expected, True), cut
    assert _find(byte_by_byte(after_id), version) == (expected, True)


def test_tail_finder_steps_over_large_records_without_finding_too_early() -> None:
    records = bytes(range(256)) * 4096  # 1 MiB of opaque batch bytes
    body = encode(fetch_body(17, ENDPOINTS, records))
    after_id = tagged_section() + body
    chunks = [after_id[i : i + 65536] for i in range(0, len(after_id), 65536)]
    assert _find(chunks, 17) == (1 + tags_offset(FETCH, 17, body), True)


def test_a_varint_longer_than_five_bytes_is_malformed() -> None:
    bad = _malformed_body()
    with pytest.raises(Malformed):
        tags_offset(FETCH, 17, bad)
    finder = TailFinder(FETCH, 17)
    with pytest.raises(Malformed):
        finder.feed(memoryview(tagged_section() + bad), 0, len(bad) + 1)


# -- ResponseReader streaming -----------------------------------------------------------


def _policy(entry: Any, size: int) -> TailFinder | None:
    return TailFinder(FETCH, entry.api_version) if entry.api_key == FETCH else None


def _stream() -> tuple[list[tuple[int, int, int, bytes]], bytes]:
    """[(correlation id, api key, version, frame)] and their concatenation."""
    fetch17 = response_frame(2, encode(fetch_body(17, ENDPOINTS)))
    fetch16 = response_frame(4, encode(fetch_body(16, [])))
    meta = metadata_response(12, 3).frame
    frames = [(2, FETCH, 17, fetch17), (3, 3, 12, meta), (4, FETCH, 16, fetch16)]
    return frames, b"".join(f[3] for f in frames)


def _expected(frames: list[tuple[int, int, int, bytes]], entries: dict[int, Any]) -> list[Any]:
    out: list[Any] = []
    for cid, key, version, data in frames:
        if key == FETCH:
            start = 4 + 4 + 1 + tags_offset(FETCH, version, data[9:])
            out += [data[:start], ResponseTail(entries[cid], data[start:])]
        else:
            out.append(ResponseFrame(entries[cid], data))
    return normalize(out)


def _reader() -> tuple[ResponseReader, InFlight, dict[int, Any]]:
    inflight = InFlight()
    entries = {
        2: inflight.add(FETCH, 17, 2),
        3: inflight.add(3, 12, 3),
        4: inflight.add(FETCH, 16, 4),
    }
    reader = ResponseReader(inflight, intercept=lambda e: True, tail_policy=_policy)
    return reader, inflight, entries


def test_streamed_fetch_goes_out_ahead_of_its_tags_at_every_cut() -> None:
    frames, stream = _stream()
    ends = {0}
    pos = 0
    for f in frames:
        pos += len(f[3])
        ends.add(pos)
    for cut, pieces in two_pieces(stream):
        reader, inflight, entries = _reader()
        first = reader.feed(pieces[0])
        assert reader.mid_frame == (cut not in ends), cut
        items = first + reader.feed(pieces[1])
        assert normalize(items) == _expected(frames, entries), cut
        assert len(inflight) == 0 and not reader.mid_frame, cut


def test_streamed_fetch_byte_by_byte() -> None:
    frames, stream = _stream()
    reader, inflight, entries = _reader()
    items: list[Any] = []
    for piece in byte_by_byte(stream):
        items += reader.feed(piece)
    assert normalize(items) == _expected(frames, entries)
    assert len(inflight) == 0


def test_a_streamed_response_keeps_its_place_until_its_tags_went_out() -> None:
    # A local answer for a later request must not overtake a fetch still streaming.
    fetch = _stream()[0][0][3]
    inflight = InFlight()
    inflight.add(FETCH, 17, 2)
    later = inflight.add(18, 3, 9)
    reader = ResponseReader(inflight, intercept=lambda e: True, tail_policy=_policy)
    items = reader.feed(fetch[: len(fetch) - 3])
    assert inflight.answer_locally(later, b"local") == []
    assert len(inflight) == 2  # the fetch still counts as in flight
    items += reader.feed(fetch[len(fetch) - 3 :])
    assert isinstance(items[-2], ResponseTail) and items[-1] == b"local"
    assert len(inflight) == 0


def _unreadable_frame() -> bytes:
    body = bytearray(encode(fetch_body(17, ENDPOINTS)))
    # The records of the first partition claim 2**20 bytes: past the end of the frame.
    at = body.index(RECORDS) - len(uvarint(len(RECORDS) + 1))
    body[at : at + len(uvarint(len(RECORDS) + 1))] = uvarint(2**20 + 1)
    return response_frame(2, bytes(body))


@pytest.mark.parametrize("step", [1, 7, 64, 10_000])
def test_a_response_that_cannot_be_walked_goes_out_untouched(step: int) -> None:
    data = _unreadable_frame()
    inflight = InFlight()
    entry = inflight.add(FETCH, 17, 2)
    reader = ResponseReader(inflight, intercept=lambda e: True, tail_policy=_policy)
    items: list[Any] = []
    for i in range(0, len(data), step):
        items += reader.feed(data[i : i + step])
    assert forwarded(items) == data
    events = [i for i in items if not isinstance(i, bytes | memoryview)]
    assert events == [UnreadableResponse(entry, "frame ends before its tagged fields")]
    assert len(inflight) == 0 and not reader.mid_frame


def _malformed_body() -> bytes:
    """A Fetch v17 body whose first records length is a 6-byte varint."""
    body = encode(fetch_body(17, []))
    at = body.index(RECORDS) - len(uvarint(len(RECORDS) + 1))
    return body[:at] + b"\xff" * 6 + body[at:]


def test_a_malformed_streamed_response_goes_out_untouched_and_the_next_one_is_read() -> None:
    bad = response_frame(2, _malformed_body())
    next_one = metadata_response(12, 3).frame
    inflight = InFlight()
    entry = inflight.add(FETCH, 17, 2)
    inflight.add(3, 12, 3)
    for step in (1, 13, len(bad) + len(next_one)):
        reader = ResponseReader(
            inflight, intercept=lambda e: e.api_key == FETCH, tail_policy=_policy
        )
        stream = bad + next_one
        items: list[Any] = []
        for i in range(0, len(stream), step):
            items += reader.feed(stream[i : i + step])
        events = [i for i in items if not isinstance(i, bytes | memoryview)]
        assert len(events) == 1 and isinstance(events[0], UnreadableResponse), step
        assert events[0].request is entry and "varint" in events[0].detail
        assert forwarded(items) == stream
        assert len(inflight) == 0
        inflight.add(FETCH, 17, 2)
        inflight.add(3, 12, 3)
        entry = inflight.get(2)


# -- same-length NodeEndpoints rewrite -------------------------------------------------


def _tail(version: int, endpoints: list[dict[str, Any]], extra: dict[int, bytes] | None = None):
    body = encode(fetch_body(version, endpoints))
    tail = body[tags_offset(FETCH, version, body) :]
    if extra:
        fields, _ = read_tagged_fields(tail, 0)
        tail = tagged_section({**fields, **extra})
    return body, tail


def _endpoints_of(version: int, body: bytes, tail: bytes) -> Any:
    """What a client that skips unknown tags reads: the body with the new tail."""
    offset = tags_offset(FETCH, version, body)
    whole = body[:offset] + tail
    cls = top_level(schema_module("fetch", version, "response"))
    return decode(cls, strip_unknown_tags(FETCH, version, whole)).node_endpoints


@pytest.mark.parametrize("version", [16, 17])
def test_a_shorter_rewrite_is_padded_to_the_same_length(version: int) -> None:
    body, tail = _tail(version, ENDPOINTS)
    out, dropped = rewrite_tail(FETCH, version, tail, Book(4), keep_length=True)
    assert len(out) == len(tail) and not dropped
    fields, _ = read_tagged_fields(out, 0)
    assert PAD_TAGS[0] in fields
    assert [(e.node_id, e.host, e.port, e.rack) for e in _endpoints_of(version, body, out)] == [
        (1, "gggg", 19001, "r1"),
        (2, "gggg", 19002, None),
    ]


@pytest.mark.parametrize("shrink", [1, 2])
def test_a_rewrite_too_short_for_a_pad_widens_the_tag_count(shrink: int) -> None:
    # The smallest pad takes 3 bytes; 1 or 2 missing bytes go into the count varint.
    body, tail = _tail(17, [{"node_id": 1, "host": "b" * 10, "port": 9092}])
    out, dropped = rewrite_tail(FETCH, 17, tail, Book(10 - shrink), keep_length=True)
    assert len(out) == len(tail) and not dropped
    assert out[: 1 + shrink] == bytes([0x81] + [0x80] * (shrink - 1) + [0x00])
    fields, end = read_tagged_fields(out, 0)
    assert end == len(out) and set(fields) == {0}
    assert [(e.host, e.port) for e in _endpoints_of(17, body, out)] == [
        ("g" * (10 - shrink), 19001)
    ]


def test_a_rewrite_of_the_same_length_needs_no_padding() -> None:
    _, tail = _tail(17, ENDPOINTS)
    out, dropped = rewrite_tail(FETCH, 17, tail, Book(len("broker-1.internal")), keep_length=True)
    assert not dropped and len(out) == len(tail) and set(read_tagged_fields(out, 0)[0]) == {0}


def test_a_longer_rewrite_drops_node_endpoints_rather_than_leak_broker_addresses() -> None:
    body, tail = _tail(17, ENDPOINTS)
    out, dropped = rewrite_tail(FETCH, 17, tail, Book(40), keep_length=True)
    assert dropped and len(out) == len(tail)
    assert b"broker-" not in out
    assert 0 not in read_tagged_fields(out, 0)[0]
    assert _endpoints_of(17, body, out) == ()
    # Without the length constraint (a gathered response) nothing is lost.
    free, dropped = rewrite_tail(FETCH, 17, tail, Book(40))
    assert not dropped
    assert [e.host for e in _endpoints_of(17, body, free)] == ["g" * 40, "g" * 40]


def test_other_tags_survive_the_same_length_rewrite() -> None:
    _, tail = _tail(17, ENDPOINTS, extra={5: b"future"})
    for host_len in (1, 17, 60):
        out = rewrite_tail(FETCH, 17, tail, Book(host_len), keep_length=True).tail
        assert len(out) == len(tail)
        assert read_tagged_fields(out, 0)[0][5] == b"future"


def test_tails_without_endpoints_to_change_come_back_as_they_are() -> None:
    _, empty = _tail(17, [])
    assert rewrite_tail(FETCH, 17, empty, Book(), keep_length=True).tail is empty
    plain = tagged_section()
    assert rewrite_tail(FETCH, 17, plain, Book(), keep_length=True).tail is plain


@pytest.mark.parametrize("count", [1, 2, 3])
def test_every_host_length_fits_exactly(count: int) -> None:
    # Varint widths make some lengths unreachable with one pad; sweep across them.
    for old_len in (1, 5, 60, 130):
        endpoints = [{"node_id": n, "host": "b" * old_len, "port": 9092 + n} for n in range(count)]
        _, tail = _tail(17, endpoints)
        for new_len in range(1, 200):
            out, dropped = rewrite_tail(FETCH, 17, tail, Book(new_len), keep_length=True)
            assert len(out) == len(tail), (old_len, new_len)
            # A section that shrank keeps its endpoints (a pad, or for 1-4 bytes a wider
            # tag count, fills it); one that grew cannot fit and drops them.
            assert dropped == (new_len > old_len), (old_len, new_len)
            fields, end = read_tagged_fields(out, 0)
            assert end == len(out)
            assert b"b" * old_len not in fields.get(0, b""), (old_len, new_len)


def test_a_tail_that_is_not_one_tagged_section_is_refused() -> None:
    with pytest.raises(Malformed):
        rewrite_tail(FETCH, 17, tagged_section() + b"\x00", Book(), keep_length=True)
