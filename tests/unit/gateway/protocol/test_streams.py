"""RequestReader, ResponseReader and InFlight fed realistic byte streams, cut everywhere.

Every sweep feeds one stream in two pieces for every possible cut point (and byte by
byte, and in random pieces with a fixed seed) and checks what the I/O layer would see:
the forwarded bytes, the events and their order, the in-flight table, ``mid_frame``.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pytest

from gateway.protocol import (
    DroppedResponse,
    HeadFinder,
    InFlight,
    InFlightRequest,
    ProtocolViolation,
    RequestFrame,
    RequestHeader,
    RequestReader,
    ResponseFrame,
    ResponseHead,
    ResponseReader,
)
from gateway.protocol._inflight import ACKS0_KEPT
from tests.unit._kafka import (
    RECORDS,
    Req,
    Resp,
    build,
    encode,
    frame,
    kio_request,
    kio_response,
    produce,
    request,
    schema_module,
    top_level,
)

# -- stream construction ---------------------------------------------------------------


def api_versions(version: int, correlation_id: int, client_id: str | None = "rdkafka") -> Req:
    fields = (
        {"client_software_name": "apache-kafka-java", "client_software_version": "3.9.0"}
        if version >= 3
        else {}
    )
    return kio_request("api_versions", version, correlation_id, client_id=client_id, **fields)


def metadata(
    version: int,
    correlation_id: int,
    client_id: str | None = "consumer-1",
    tagged: dict[int, bytes] | None = None,
) -> Req:
    cls = top_level(schema_module("metadata", version, "request"))
    entity = build(cls, topics=[{"name": "orders"}, {"name": "payments"}])
    return request(
        3,
        version,
        correlation_id,
        encode(entity),
        header_version=cls.__header_schema__.__version__,
        client_id=client_id,
        tagged=tagged,
    )


def mixed_requests() -> list[Req]:
    """What one client connection might send, classic and flexible, every header kind."""
    return [
        api_versions(0, 1),
        api_versions(3, 2, client_id="apache-kafka-java"),
        metadata(1, 3, client_id=None),
        metadata(12, 4, tagged={0: b"trace-id", 7: b"\x01\x02"}),
        produce(3, 5, acks=1, transactional_id=None),
        produce(3, 6, acks=0, transactional_id="txn-a"),
        produce(7, 7, acks=-1, transactional_id=None, client_id=None),
        produce(8, 8, acks=0, transactional_id=None),
        produce(9, 9, acks=1, transactional_id="txn-b"),
        produce(9, 10, acks=0, transactional_id=None, tagged={3: b"x" * 20}),
        produce(11, 11, acks=-1, transactional_id="txn-c"),
        produce(11, 12, acks=0, transactional_id="txn-d", client_id=""),
        # ControlledShutdown v0: header v0, no client id; body is the broker id.
        request(7, 0, 13, struct.pack(">i", 1), header_version=0),
        # A key the gateway does not know: forwarded, and its response awaited.
        request(999, 0, 14, b"opaque body", header_version=1),
        produce(13, 15, acks=1, transactional_id=None),
    ]


def metadata_response(version: int, correlation_id: int) -> Resp:
    cls = top_level(schema_module("metadata", version, "response"))
    entity = build(
        cls,
        brokers=[{"node_id": 0, "host": "broker-0", "port": 9092}],
        topics=[{"name": "orders", "partitions": [{"partition_index": 0, "leader_id": 0}]}],
    )
    return kio_response(correlation_id, entity)


def produce_response(version: int, correlation_id: int) -> Resp:
    cls = top_level(schema_module("produce", version, "response"))
    entity = build(
        cls,
        responses=[{"name": "orders", "partition_responses": [{"index": 0, "base_offset": 41}]}],
    )
    return kio_response(correlation_id, entity)


def api_versions_response(version: int, correlation_id: int) -> Resp:
    cls = top_level(schema_module("api_versions", version, "response"))
    entity = build(
        cls, api_keys=[{"api_key": 0, "min_version": 3, "max_version": 11}, {"api_key": 18}]
    )
    return kio_response(correlation_id, entity)


def fetch_response(version: int, correlation_id: int, records: bytes = RECORDS * 3) -> Resp:
    cls = top_level(schema_module("fetch", version, "response"))
    entity = build(
        cls,
        responses=[{"topic": "orders", "partitions": [{"high_watermark": 42, "records": records}]}],
    )
    return kio_response(correlation_id, entity)


def join(frames: Iterable[Req | Resp]) -> bytes:
    return b"".join(f.frame for f in frames)


def boundaries(frames: Iterable[Req | Resp | bytes]) -> set[int]:
    """Stream offsets at which no frame is open (0, and the end of every frame)."""
    ends, pos = {0}, 0
    for f in frames:
        pos += len(f if isinstance(f, bytes) else f.frame)
        ends.add(pos)
    return ends


# -- feeding ---------------------------------------------------------------------------


def two_pieces(data: bytes) -> Iterator[tuple[int, list[bytes]]]:
    for cut in range(len(data) + 1):
        yield cut, [data[:cut], data[cut:]]


def random_pieces(data: bytes, seed: int, max_piece: int = 97) -> list[bytes]:
    rng = random.Random(seed)
    pieces, pos = [], 0
    while pos < len(data):
        step = rng.randint(1, max_piece)
        pieces.append(data[pos : pos + step])
        pos += step
    return pieces


def byte_by_byte(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def feed_all(reader: RequestReader | ResponseReader, pieces: Sequence[bytes]) -> list[Any]:
    items: list[Any] = []
    for piece in pieces:
        items += reader.feed(piece)
    return items


def normalize(items: Iterable[Any]) -> list[Any]:
    """Merge runs of forwarded buffers into one bytes object; keep events as they are.

    Fails on empty buffers: they would cost the I/O layer a write for nothing.
    """
    out: list[Any] = []
    for item in items:
        if isinstance(item, bytes | memoryview):
            chunk = bytes(item)
            assert chunk, "reader emitted an empty buffer"
            if out and isinstance(out[-1], bytes):
                out[-1] += chunk
            else:
                out.append(chunk)
        else:
            out.append(item)
    return out


def forwarded(items: Iterable[Any]) -> bytes:
    return b"".join(bytes(i) for i in items if isinstance(i, bytes | memoryview))


def pending(inflight: InFlight) -> list[int]:
    """Correlation ids awaiting an answer, in request order (the table's own order)."""
    return [e.correlation_id for e in inflight.entries if e.expects_response]


def header_of(req: Req) -> RequestHeader:
    return RequestHeader(req.key, req.version, req.correlation_id, req.client_id, req.header_len)


def expected_request_items(reqs: Sequence[Req], intercepted: Callable[[Req], bool]) -> list[Any]:
    return normalize(
        RequestFrame(header_of(r), r.frame, InFlightRequest(r.key, r.version, r.correlation_id))
        if intercepted(r)
        else r.frame
        for r in reqs
    )


# -- RequestReader ---------------------------------------------------------------------

REQUESTS = mixed_requests()
REQUEST_STREAM = join(REQUESTS)
REQUEST_BOUNDARIES = boundaries(REQUESTS)
AWAITED = [r.correlation_id for r in REQUESTS if r.expects_response]


def test_request_stream_is_a_few_kb_of_mixed_frames() -> None:
    # Guards the sweeps below against silently shrinking to nothing.
    assert 2_000 < len(REQUEST_STREAM) < 8_000
    assert len(AWAITED) == 11 and len(REQUESTS) == 15


def test_request_reader_forwards_every_byte_and_records_awaited_ids_at_every_cut() -> None:
    for cut, pieces in two_pieces(REQUEST_STREAM):
        inflight = InFlight()
        reader = RequestReader(inflight)
        first = reader.feed(pieces[0])
        assert reader.mid_frame == (cut not in REQUEST_BOUNDARIES), cut
        items = first + reader.feed(pieces[1])
        assert normalize(items) == [REQUEST_STREAM], cut
        assert pending(inflight) == AWAITED, cut
        assert not reader.mid_frame


@pytest.mark.parametrize(
    "pieces",
    [
        pytest.param(byte_by_byte(REQUEST_STREAM), id="byte-by-byte"),
        *(
            pytest.param(random_pieces(REQUEST_STREAM, seed), id=f"random-seed-{seed}")
            for seed in range(5)
        ),
        pytest.param(random_pieces(REQUEST_STREAM, 99, max_piece=7), id="random-small-pieces"),
    ],
)
def test_request_reader_forwards_every_byte_in_many_pieces(pieces: list[bytes]) -> None:
    inflight = InFlight()
    reader = RequestReader(inflight)
    items = feed_all(reader, pieces)
    assert forwarded(items) == REQUEST_STREAM
    assert all(isinstance(i, bytes | memoryview) for i in items)
    assert pending(inflight) == AWAITED
    assert not reader.mid_frame


def test_request_reader_records_api_key_and_version_of_each_awaited_request() -> None:
    inflight = InFlight()
    RequestReader(inflight).feed(REQUEST_STREAM)
    for req in REQUESTS:
        entry = inflight.get(req.correlation_id)
        if req.expects_response:
            assert entry is not None
            assert (entry.api_key, entry.api_version) == (req.key, req.version)
            assert entry.local is None
        else:
            assert entry is None


def _intercepts(key: int, version: int) -> bool:
    # ApiVersions, Metadata and the flexible Produce v9 (one of them acks=0).
    return key in (18, 3) or (key == 0 and version == 9)


def _is_intercepted(req: Req) -> bool:
    return _intercepts(req.key, req.version)


EXPECTED_INTERCEPTED = expected_request_items(REQUESTS, _is_intercepted)
# Intercepted requests hold their in-flight slot too, in the order the client sent them,
# so a local answer cannot overtake an earlier upstream response.
AWAITED_OR_INTERCEPTED = [
    r.correlation_id for r in REQUESTS if r.expects_response or _is_intercepted(r)
]


def test_intercepted_stream_really_mixes_frames_and_forwarded_runs() -> None:
    frames = [i for i in EXPECTED_INTERCEPTED if isinstance(i, RequestFrame)]
    assert len(frames) == 6
    assert len(EXPECTED_INTERCEPTED) > len(frames) + 1


def test_request_reader_hands_intercepted_frames_whole_with_parsed_header_at_every_cut() -> None:
    for cut, pieces in two_pieces(REQUEST_STREAM):
        inflight = InFlight()
        reader = RequestReader(inflight, intercept=_intercepts)
        first = reader.feed(pieces[0])
        assert reader.mid_frame == (cut not in REQUEST_BOUNDARIES), cut
        items = first + reader.feed(pieces[1])
        assert normalize(items) == EXPECTED_INTERCEPTED, cut
        assert pending(inflight) == AWAITED_OR_INTERCEPTED, cut


@pytest.mark.parametrize(
    "pieces",
    [
        pytest.param(byte_by_byte(REQUEST_STREAM), id="byte-by-byte"),
        *(
            pytest.param(random_pieces(REQUEST_STREAM, seed), id=f"random-seed-{seed}")
            for seed in range(3)
        ),
    ],
)
def test_request_reader_hands_intercepted_frames_whole_in_many_pieces(
    pieces: list[bytes],
) -> None:
    inflight = InFlight()
    reader = RequestReader(inflight, intercept=_intercepts)
    items = feed_all(reader, pieces)
    assert normalize(items) == EXPECTED_INTERCEPTED
    assert pending(inflight) == AWAITED_OR_INTERCEPTED


def test_request_frame_header_matches_what_the_client_wrote() -> None:
    inflight = InFlight()
    items = RequestReader(inflight, intercept=lambda k, v: True).feed(REQUEST_STREAM)
    assert [i.header for i in items] == [header_of(r) for r in REQUESTS]
    # Each frame carries the in-flight entry it holds (even an acks=0 produce's).
    assert all(i.request is inflight.get(i.header.correlation_id) for i in items)
    assert [(i.request.api_key, i.request.api_version) for i in items] == [
        (r.key, r.version) for r in REQUESTS
    ]
    by_id = {i.header.correlation_id: i.header for i in items}
    assert by_id[3].client_id is None  # null client id (int16 -1)
    assert by_id[12].client_id == ""  # empty, not null
    assert by_id[13].client_id is None  # header v0 has none
    assert by_id[13].body_offset == 8
    assert by_id[4].body_offset == 8 + 2 + len("consumer-1") + len(
        b"\x02\x00\x08trace-id\x07\x02\x01\x02"
    )


PRODUCE_CASES = [
    (version, acks, txn)
    for version in range(3, 14)
    for acks in (0, 1, -1)
    for txn in (None, "transactional-producer-7")
]


@pytest.mark.parametrize(("version", "acks", "txn"), PRODUCE_CASES)
def test_produce_awaits_a_response_unless_acks_is_zero_at_every_cut(
    version: int, acks: int, txn: str | None
) -> None:
    req = produce(version, 77, acks=acks, transactional_id=txn, records=b"r" * 16)
    tail = metadata(1, 78)  # a request behind it must still be found
    data = req.frame + tail.frame
    expected = [77, 78] if acks else [78]
    for cut, pieces in two_pieces(data):
        inflight = InFlight()
        reader = RequestReader(inflight)
        items = feed_all(reader, pieces)
        assert forwarded(items) == data, cut
        assert pending(inflight) == expected, cut


def test_produce_acks_is_read_after_header_tagged_fields() -> None:
    # The tagged section holds bytes that would read as acks=0 if it were not skipped.
    req = produce(9, 5, acks=1, transactional_id=None, tagged={0: b"\x00\x00\x00\x00"})
    inflight = InFlight()
    RequestReader(inflight).feed(req.frame)
    assert pending(inflight) == [5]


# -- ResponseReader --------------------------------------------------------------------


def _responses() -> tuple[list[Resp], list[Resp]]:
    """(what the broker sends, the subset the client awaits); the rest answer acks=0."""
    sent = [
        api_versions_response(3, 2),  # ApiVersions: header v0 even though flexible
        metadata_response(1, 3),
        produce_response(3, 6),  # Tansu answering an acks=0 produce
        metadata_response(12, 4),
        produce_response(9, 9),
        produce_response(9, 10),  # acks=0 again
        fetch_response(12, 20),
        produce_response(11, 999),  # a correlation id nobody ever used
    ]
    awaited = [r for r in sent if r.correlation_id not in (6, 10, 999)]
    return sent, awaited


RESPONSES, AWAITED_RESPONSES = _responses()
RESPONSE_STREAM = join(RESPONSES)
RESPONSE_BOUNDARIES = boundaries(RESPONSES)


def inflight_for(resps: Iterable[Resp]) -> tuple[InFlight, dict[int, InFlightRequest]]:
    inflight = InFlight()
    entries = {r.correlation_id: inflight.add(r.key, r.version, r.correlation_id) for r in resps}
    return inflight, entries


def expected_response_items(
    entries: dict[int, InFlightRequest], intercepted: Callable[[Resp], bool]
) -> list[Any]:
    out: list[Any] = []
    for r in RESPONSES:
        entry = entries.get(r.correlation_id)
        if entry is None:
            out.append(DroppedResponse(r.correlation_id, len(r.frame) - 4))
        elif intercepted(r):
            out.append(ResponseFrame(entry, r.frame))
        else:
            out.append(r.frame)
    return normalize(out)


def test_response_stream_is_a_few_kb() -> None:
    assert 1_000 < len(RESPONSE_STREAM) < 8_000
    assert RESPONSES[0].header_len == 4  # ApiVersions v3 response: header v0
    assert RESPONSES[3].header_len == 5  # Metadata v12 response: header v1


def test_response_reader_forwards_awaited_and_drops_unknown_ids_at_every_cut() -> None:
    for cut, pieces in two_pieces(RESPONSE_STREAM):
        inflight, entries = inflight_for(AWAITED_RESPONSES)
        reader = ResponseReader(inflight)
        first = reader.feed(pieces[0])
        assert reader.mid_frame == (cut not in RESPONSE_BOUNDARIES), cut
        items = first + reader.feed(pieces[1])
        assert normalize(items) == expected_response_items(entries, lambda r: False), cut
        assert forwarded(items) == join(AWAITED_RESPONSES), cut
        assert len(inflight) == 0, cut
        assert not reader.mid_frame


@pytest.mark.parametrize(
    "pieces",
    [
        pytest.param(byte_by_byte(RESPONSE_STREAM), id="byte-by-byte"),
        *(
            pytest.param(random_pieces(RESPONSE_STREAM, seed), id=f"random-seed-{seed}")
            for seed in range(5)
        ),
    ],
)
def test_response_reader_forwards_awaited_and_drops_unknown_ids_in_many_pieces(
    pieces: list[bytes],
) -> None:
    inflight, entries = inflight_for(AWAITED_RESPONSES)
    items = feed_all(ResponseReader(inflight), pieces)
    assert normalize(items) == expected_response_items(entries, lambda r: False)
    assert len(inflight) == 0


def test_dropped_response_reports_its_correlation_id_and_size() -> None:
    inflight, _ = inflight_for(AWAITED_RESPONSES)
    dropped = [
        i
        for i in ResponseReader(inflight).feed(RESPONSE_STREAM)
        if not isinstance(i, bytes | memoryview)
    ]
    assert [(d.correlation_id, d.size) for d in dropped] == [
        (r.correlation_id, len(r.frame) - 4) for r in RESPONSES if r.correlation_id in (6, 10, 999)
    ]


def test_response_reader_keeps_requests_whose_response_has_not_come() -> None:
    inflight, entries = inflight_for([*AWAITED_RESPONSES, produce_response(9, 50)])
    ResponseReader(inflight).feed(RESPONSE_STREAM)
    assert pending(inflight) == [50]
    assert inflight.get(50) is entries[50]


def _metadata_intercepted(r: Resp) -> bool:
    return r.key == 3


def test_response_reader_hands_intercepted_responses_whole_at_every_cut() -> None:
    for cut, pieces in two_pieces(RESPONSE_STREAM):
        inflight, entries = inflight_for(AWAITED_RESPONSES)
        reader = ResponseReader(inflight, intercept=lambda e: e.api_key == 3)
        first = reader.feed(pieces[0])
        assert reader.mid_frame == (cut not in RESPONSE_BOUNDARIES), cut
        items = first + reader.feed(pieces[1])
        assert normalize(items) == expected_response_items(entries, _metadata_intercepted), cut
        assert len(inflight) == 0, cut


def test_intercepted_response_carries_the_request_it_answers() -> None:
    inflight, entries = inflight_for(AWAITED_RESPONSES)
    items = ResponseReader(inflight, intercept=lambda e: True).feed(RESPONSE_STREAM)
    frames = [i for i in items if isinstance(i, ResponseFrame)]
    assert [
        (f.request.correlation_id, f.request.api_key, f.request.api_version) for f in frames
    ] == [(r.correlation_id, r.key, r.version) for r in AWAITED_RESPONSES]
    assert all(f.request is entries[f.request.correlation_id] for f in frames)


def test_a_whole_intercepted_response_read_alone_is_handed_over_without_a_copy() -> None:
    """The commonest intercepted response (a Produce v10+ answer, walked for its
    NodeEndpoints) arrives whole in one read: it is handed over as the bytes read, and
    its request is finished, as a gathered one would be."""
    r = produce_response(11, 9)
    inflight, entries = inflight_for([r])
    data = bytes(r.frame)
    items = ResponseReader(inflight, intercept=lambda e: True).feed(data)
    assert len(items) == 1 and isinstance(items[0], ResponseFrame)
    assert items[0].frame is data
    assert items[0].request is entries[9] and entries[9].response_bytes == len(data)
    assert len(inflight) == 0


def test_a_response_to_stream_read_alone_still_streams() -> None:
    """The policy gives a finder: the fast path leaves the frame to the general one."""
    r = metadata_response(12, 4)
    inflight, _ = inflight_for([r])
    policy_asked: list[int] = []

    def policy(entry: InFlightRequest, size: int) -> HeadFinder:
        policy_asked.append(size)
        return HeadFinder(entry.api_key, entry.api_version, "brokers")

    items = ResponseReader(inflight, intercept=lambda e: True, tail_policy=policy).feed(r.frame)
    assert isinstance(items[0], ResponseHead)
    assert b"".join([items[0].head, *(bytes(i) for i in items[1:])]) == r.frame
    assert len(inflight) == 0


# -- local answers (InFlight.answer_locally) ------------------------------------------

LOCAL_B = frame(struct.pack(">i", 2) + b"local answer B")
LOCAL_D = frame(struct.pack(">i", 4) + b"local answer D")


def _local_setup() -> tuple[InFlight, dict[int, InFlightRequest], list[Resp]]:
    """Requests 1 (upstream), 2 (local), 3 (upstream), 4 (local), in that order."""
    inflight = InFlight()
    entries = {
        1: inflight.add(1, 12, 1),
        2: inflight.add(18, 3, 2),
        3: inflight.add(3, 12, 3),
        4: inflight.add(18, 3, 4),
    }
    return inflight, entries, [fetch_response(12, 1), metadata_response(12, 3)]


def test_local_answer_with_nothing_ahead_goes_out_at_once() -> None:
    inflight = InFlight()
    entry = inflight.add(18, 3, 1)
    assert inflight.answer_locally(entry, LOCAL_B) == [LOCAL_B]
    assert len(inflight) == 0
    assert not inflight.has_local_pending


def test_local_answers_given_before_upstream_responses_keep_request_order_at_every_cut() -> None:
    _, _, upstream = _local_setup()
    data = join(upstream)
    for cut, pieces in two_pieces(data):
        inflight, entries, _ = _local_setup()
        items: list[Any] = []
        items += inflight.answer_locally(entries[2], LOCAL_B)
        items += inflight.answer_locally(entries[4], LOCAL_D)
        assert items == [], "a local answer overtook an earlier upstream response"
        items += feed_all(ResponseReader(inflight), pieces)
        assert forwarded(items) == upstream[0].frame + LOCAL_B + upstream[1].frame + LOCAL_D, cut
        assert len(inflight) == 0 and not inflight.has_local_pending


def test_local_answer_given_while_an_upstream_response_streams_waits_for_its_end() -> None:
    # The client's request 2 is answered locally while the response to request 1 is
    # arriving: the local frame must not land in the middle of that response. (Cuts run
    # up to the point where the response to request 3 is recognised: a local answer must
    # come before any response to a later request has been handed out.)
    _, _, upstream = _local_setup()
    data = join(upstream)
    first_end = len(upstream[0].frame)
    for cut in range(first_end + 8):
        inflight, entries, _ = _local_setup()
        reader = ResponseReader(inflight)
        items = reader.feed(data[:cut])
        items += inflight.answer_locally(entries[2], LOCAL_B)
        items += inflight.answer_locally(entries[4], LOCAL_D)
        items += reader.feed(data[cut:])
        assert forwarded(items) == upstream[0].frame + LOCAL_B + upstream[1].frame + LOCAL_D, cut


def test_intercepted_upstream_response_goes_out_before_a_later_local_answer() -> None:
    _, _, upstream = _local_setup()
    data = join(upstream)
    first_end = len(upstream[0].frame)
    for cut in range(first_end + 1):
        inflight, entries, _ = _local_setup()
        reader = ResponseReader(inflight, intercept=lambda e: True)
        items = reader.feed(data[:cut])
        items += inflight.answer_locally(entries[2], LOCAL_B)
        items += reader.feed(data[cut:])
        items += inflight.answer_locally(entries[4], LOCAL_D)
        assert items == [
            ResponseFrame(entries[1], upstream[0].frame),
            LOCAL_B,
            ResponseFrame(entries[3], upstream[1].frame),
            LOCAL_D,
        ], cut


def test_local_answer_given_while_handling_an_intercepted_response_precedes_later_ones() -> None:
    # The gateway asks the upstream something for request 2 (e.g. Metadata to build a
    # DescribeCluster answer) and answers 2 when that response (M) is handed over, while
    # the response to request 3 has already started arriving in the same read.
    internal, upstream = metadata_response(12, 100), metadata_response(12, 3)
    data = internal.frame + upstream.frame
    for cut in range(len(data) + 1):
        inflight = InFlight()
        m = inflight.add(3, 12, 100)  # the gateway's own request, sent before 3
        b = inflight.add(60, 0, 2)
        inflight.add(3, 12, 3)
        reader = ResponseReader(inflight, intercept=lambda e: e.correlation_id == 100)
        written: list[bytes] = []
        for piece in (data[:cut], data[cut:]):
            for item in reader.feed(piece):
                if isinstance(item, ResponseFrame):
                    assert item.request is m
                    # M is the gateway's own: not written; it produces the answer to 2.
                    written += inflight.answer_locally(b, LOCAL_B)
                else:
                    written.append(bytes(item))
        assert b"".join(written) == LOCAL_B + upstream.frame, cut
        assert len(inflight) == 0


def test_in_flight_counts_a_response_that_is_still_arriving() -> None:
    # A draining connection closes when nothing is in flight; half a response is not done.
    inflight = InFlight()
    inflight.add(1, 12, 1)
    response = fetch_response(12, 1).frame
    reader = ResponseReader(inflight)
    reader.feed(response[:20])
    assert len(inflight) == 1
    reader.feed(response[20:])
    assert len(inflight) == 0


def test_upstream_response_for_a_locally_answered_request_is_dropped() -> None:
    inflight = InFlight()
    upstream_entry = inflight.add(3, 12, 1)
    local_entry = inflight.add(18, 3, 2)
    assert inflight.answer_locally(local_entry, LOCAL_B) == []
    late = metadata_response(12, 2).frame  # the broker answers request 2 as well
    items = ResponseReader(inflight).feed(metadata_response(12, 1).frame + late)
    assert normalize(items) == [
        metadata_response(12, 1).frame + LOCAL_B,
        DroppedResponse(2, len(late) - 4),
    ]
    assert upstream_entry.correlation_id == 1 and len(inflight) == 0


# -- protocol violations ---------------------------------------------------------------

MAX = 1024


def _violation_sweep(
    make_reader: Callable[[], tuple[RequestReader | ResponseReader, InFlight]],
    good: Sequence[Req],
    bad: bytes,
    after: bytes,
    reason: str,
    intercepted: Callable[[Req], bool] = lambda r: False,
) -> None:
    """Whatever the cut, the frames before ``bad`` come out as usual, then exactly one
    violation, then nothing (not even for ``after``, which is a valid frame)."""
    data = join(good) + bad + after
    before = expected_request_items(good, intercepted)
    awaited = [r.correlation_id for r in good if r.expects_response or intercepted(r)]
    for cut, pieces in two_pieces(data):
        reader, inflight = make_reader()
        items = feed_all(reader, pieces)
        violations = [i for i in items if isinstance(i, ProtocolViolation)]
        assert [v.reason for v in violations] == [reason], cut
        assert items[-1] is violations[0], f"items after the violation at cut {cut}"
        assert normalize(items[:-1]) == before, cut
        assert pending(inflight) == awaited, cut
        # The reader stays dead: nothing more is emitted, whatever arrives.
        assert reader.feed(after) == [], cut
        assert reader.feed(join(good)) == [], cut


def _request_reader(intercept: Any = None) -> Callable[[], tuple[RequestReader, InFlight]]:
    def make() -> tuple[RequestReader, InFlight]:
        inflight = InFlight()
        return RequestReader(inflight, intercept, max_frame_bytes=MAX), inflight

    return make


def _response_reader() -> tuple[ResponseReader, InFlight]:
    inflight = InFlight()
    for cid in (1, 2, 3):
        inflight.add(3, 12, cid)
    return ResponseReader(inflight, max_frame_bytes=MAX), inflight


GOOD_REQUESTS = [api_versions(3, 1), produce(3, 2, acks=1, transactional_id=None), metadata(12, 3)]
AFTER_REQUEST = metadata(1, 4).frame


def _truncated_produce(version: int, keep: int) -> bytes:
    """A produce frame whose payload stops ``keep`` bytes into the body (before acks)."""
    full = produce(version, 9, acks=1, transactional_id="txn")
    payload = full.frame[4 : 4 + full.header_len + keep]
    return frame(payload)


BAD_REQUESTS = {
    "oversize": (struct.pack(">i", MAX + 1) + metadata(1, 9).frame[4:], "oversize_frame"),
    "oversize-huge": (struct.pack(">i", 2**31 - 1) + b"\x00" * 8, "oversize_frame"),
    "shorter-than-header": (
        struct.pack(">i", 7) + b"\x00\x03\x00\x01\x00\x00\x00",
        "malformed_frame",
    ),
    "zero-size": (struct.pack(">i", 0), "malformed_frame"),
    "negative-size": (struct.pack(">i", -5), "malformed_frame"),
    "produce-v3-no-acks": (_truncated_produce(3, 3), "malformed_frame"),
    "produce-v9-no-acks": (_truncated_produce(9, 2), "malformed_frame"),
    "produce-header-only": (_truncated_produce(11, 0), "malformed_frame"),
    "produce-bad-client-id-length": (
        frame(struct.pack(">hhih", 0, 3, 9, -2) + b"\x00" * 12),
        "malformed_frame",
    ),
    "produce-tagged-fields-past-frame": (
        frame(struct.pack(">hhih", 0, 9, 9, -1) + b"\x01\x00\x7f" + b"\x00" * 8),
        "malformed_frame",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_request_reader_reports_one_violation_and_stops_at_every_cut(case: str) -> None:
    bad, reason = BAD_REQUESTS[case]
    _violation_sweep(_request_reader(), GOOD_REQUESTS, bad, AFTER_REQUEST, reason)


def test_request_of_exactly_max_frame_bytes_is_accepted() -> None:
    body = b"\x00" * (MAX - 10)
    req = request(999, 0, 1, body, header_version=1, client_id=None)
    assert len(req.frame) == MAX + 4
    inflight = InFlight()
    items = RequestReader(inflight, max_frame_bytes=MAX).feed(req.frame)
    assert forwarded(items) == req.frame and pending(inflight) == [1]


def _truncated_client_id_request(key: int) -> bytes:
    # Header says the client id has 50 bytes; the frame ends after 2 of them.
    return frame(struct.pack(">hhih", key, 0, 9, 50) + b"ab")


@pytest.mark.parametrize(
    ("case", "bad"),
    [
        ("truncated-client-id", _truncated_client_id_request(18)),
        ("truncated-header-tags", frame(struct.pack(">hhih", 18, 3, 9, -1) + b"\x01\x00\x05ab")),
        ("oversize", struct.pack(">i", MAX + 1) + api_versions(0, 9).frame[4:]),
    ],
)
def test_intercepted_request_with_bad_header_is_one_violation_at_every_cut(
    case: str, bad: bytes
) -> None:
    reason = "oversize_frame" if case == "oversize" else "malformed_frame"
    _violation_sweep(
        _request_reader(_intercepts), GOOD_REQUESTS, bad, AFTER_REQUEST, reason, _is_intercepted
    )


GOOD_RESPONSES = (
    metadata_response(12, 1).frame + metadata_response(1, 99).frame + metadata_response(12, 2).frame
)
AFTER_RESPONSE = metadata_response(12, 3).frame

BAD_RESPONSES = {
    "oversize": (
        struct.pack(">i", MAX + 1) + struct.pack(">i", 3) + b"\x00" * 32,
        "oversize_frame",
    ),
    "shorter-than-correlation-id": (struct.pack(">i", 3) + b"\x00\x00\x00", "malformed_frame"),
    "negative-size": (struct.pack(">i", -1) + b"\x00" * 4, "malformed_frame"),
}


@pytest.mark.parametrize("case", sorted(BAD_RESPONSES))
def test_response_reader_reports_one_violation_and_stops_at_every_cut(case: str) -> None:
    bad, reason = BAD_RESPONSES[case]
    # GOOD_RESPONSES holds two awaited responses around a dropped one.
    data_good = metadata_response(12, 1).frame + metadata_response(12, 2).frame
    data = GOOD_RESPONSES + bad + AFTER_RESPONSE
    for cut, pieces in two_pieces(data):
        reader, inflight = _response_reader()
        items = feed_all(reader, pieces)
        violations = [i for i in items if isinstance(i, ProtocolViolation)]
        assert [v.reason for v in violations] == [reason], cut
        assert items[-1] is violations[0], cut
        assert forwarded(items) == data_good, cut
        assert [i.correlation_id for i in items if isinstance(i, DroppedResponse)] == [99]
        assert reader.feed(AFTER_RESPONSE) == []
        assert pending(inflight) == [3]


def test_violation_detail_names_the_limit() -> None:
    (violation,) = RequestReader(InFlight(), max_frame_bytes=MAX).feed(
        struct.pack(">i", MAX + 1) + b"\x00" * 8
    )
    assert violation.reason == "oversize_frame"
    assert str(MAX) in violation.detail and str(MAX + 1) in violation.detail


# -- mid_frame -------------------------------------------------------------------------


def test_mid_frame_is_false_for_a_fresh_reader_and_after_empty_input() -> None:
    reader = RequestReader(InFlight())
    assert reader.feed(b"") == []
    assert not reader.mid_frame
    assert not ResponseReader(InFlight()).mid_frame


@pytest.mark.parametrize("cut", [1, 4, 11, 12, 40])
def test_mid_frame_when_a_client_stops_inside_a_request(cut: int) -> None:
    reader = RequestReader(InFlight())
    reader.feed(REQUEST_STREAM[:cut])
    assert reader.mid_frame


def test_mid_frame_inside_a_dropped_response() -> None:
    reader = ResponseReader(InFlight())  # nothing awaited: everything is dropped
    data = produce_response(9, 10).frame
    (dropped,) = reader.feed(data[:12])
    assert isinstance(dropped, DroppedResponse)
    assert reader.mid_frame
    assert reader.feed(data[12:]) == []
    assert not reader.mid_frame


def test_request_reader_counts_each_frame_once_at_every_cut() -> None:
    # The connection registry's request count: a produce header that waits for more
    # bytes must not be counted twice.
    for cut, pieces in two_pieces(REQUEST_STREAM):
        reader = RequestReader(InFlight())
        for piece in pieces:
            reader.feed(piece)
        assert reader.frames == len(REQUESTS), cut


# -- order, not correlation ids (clients may reuse them; brokers may answer acks=0) ------


def test_reused_correlation_ids_are_answered_in_request_order() -> None:
    # Kafka never looks at correlation ids: a client may send every request with id 7.
    requests = [metadata(12, 7), produce(9, 7, acks=1, transactional_id=None), metadata(1, 7)]
    inflight = InFlight()
    RequestReader(inflight).feed(join(requests))
    responses = [metadata_response(12, 7), produce_response(9, 7), metadata_response(1, 7)]
    answered: list[tuple[int, int]] = []
    inflight.observer = lambda e: answered.append((e.api_key, e.api_version))
    items = ResponseReader(inflight).feed(join(responses))
    assert forwarded(items) == join(responses)
    assert answered == [(3, 12), (0, 9), (3, 1)]
    assert len(inflight) == 0


def _acks0_then(reused: bool) -> tuple[InFlight, list[Req]]:
    """An acks=0 produce (id 5), then a Metadata request with id 5 or 6."""
    requests = [produce(9, 5, acks=0, transactional_id=None), metadata(12, 5 if reused else 6)]
    inflight = InFlight()
    RequestReader(inflight).feed(join(requests))
    return inflight, requests


def test_an_answered_acks0_produce_is_dropped_and_remembered() -> None:
    inflight, _ = _acks0_then(reused=False)
    tansu = produce_response(9, 5).frame  # Tansu answers acks=0 produces
    items = ResponseReader(inflight).feed(tansu + metadata_response(12, 6).frame)
    assert normalize(items) == [
        DroppedResponse(5, len(tansu) - 4, acks0=True),
        metadata_response(12, 6).frame,
    ]
    assert inflight.acks0_answered is True and len(inflight) == 0


def test_an_unanswered_acks0_produce_is_forgotten_when_a_later_response_comes() -> None:
    inflight, _ = _acks0_then(reused=False)
    items = ResponseReader(inflight).feed(metadata_response(12, 6).frame)
    assert forwarded(items) == metadata_response(12, 6).frame
    assert inflight.acks0_answered is False and not inflight.entries
    # Known now: later acks=0 produces are not even recorded.
    RequestReader(inflight).feed(produce(9, 8, acks=0, transactional_id=None).frame)
    assert not inflight.entries


def test_acks0_produce_followed_by_the_same_id_once_the_broker_is_known() -> None:
    # The one case order alone cannot settle: acks=0 id 5, then Metadata id 5.
    for answers_acks0 in (True, False):
        inflight, _ = _acks0_then(reused=True)
        inflight.acks0_answered = answers_acks0
        answer = metadata_response(12, 5).frame
        wire = (produce_response(9, 5).frame if answers_acks0 else b"") + answer
        items = ResponseReader(inflight).feed(wire)
        assert forwarded(items) == answer, answers_acks0
        assert len(inflight) == 0 and not inflight.entries, answers_acks0


def test_acks0_produce_followed_by_the_same_id_with_an_unknown_broker_assumes_kafka() -> None:
    inflight, _ = _acks0_then(reused=True)
    answer = metadata_response(12, 5).frame
    items = ResponseReader(inflight).feed(answer)
    assert forwarded(items) == answer
    assert inflight.acks0_answered is False and len(inflight) == 0


def test_acks0_produce_does_not_hold_back_a_local_answer() -> None:
    inflight = InFlight()
    RequestReader(inflight).feed(produce(9, 5, acks=0, transactional_id=None).frame)
    local = inflight.add(18, 3, 6, to_upstream=False)
    assert inflight.answer_locally(local, LOCAL_B) == [LOCAL_B]
    assert len(inflight) == 0


def test_upstream_response_is_never_matched_to_a_request_the_gateway_answers() -> None:
    # An intercepted request (answered locally, later) and an upstream one share id 3.
    inflight = InFlight()
    local = inflight.add(57, 1, 3, to_upstream=False)
    upstream = inflight.add(3, 12, 3)
    assert inflight.match_upstream(3) is upstream
    assert inflight.get(3) is local


def test_acks0_entries_kept_are_bounded() -> None:
    inflight = InFlight()
    reader = RequestReader(inflight)
    acks0 = produce(9, 1, acks=0, transactional_id=None).frame
    for _ in range(ACKS0_KEPT + 10):
        reader.feed(acks0)
    assert len(inflight.entries) == ACKS0_KEPT and len(inflight) == 0


def test_acks0_answer_is_recognised_when_another_request_stands_between_it_and_its_id() -> None:
    # acks=0 id 5, Metadata id 6, Metadata id 5: a first response with id 5 cannot be for
    # the second Metadata (6 would come first), so it is the acks=0 answer.
    requests = [
        produce(9, 5, acks=0, transactional_id=None),
        metadata(12, 6),
        metadata(12, 5),
    ]
    inflight = InFlight()
    RequestReader(inflight).feed(join(requests))
    tansu = produce_response(9, 5).frame
    rest = metadata_response(12, 6).frame + metadata_response(12, 5).frame
    items = ResponseReader(inflight).feed(tansu + rest)
    assert forwarded(items) == rest
    assert inflight.acks0_answered is True and len(inflight) == 0
