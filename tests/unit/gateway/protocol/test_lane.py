"""The compiled scanner and reads (gateway/protocol/_scan.py, gateway/server/_lane.pyx)
do what the readers alone do.

Every read a socket gives a connection goes through ``buffer_updated``; the scanner
takes the plain requests and responses of a read and hands the rest to the readers
(``data_received``, ``upstream_data``). A second connection fed the same bytes
through the readers alone, without the scanner, is the reference: both must send the
same bytes each way, count the same requests, responses, bytes and rewrite errors, and
log the same request-log lines, for any mix of requests (forwarded, answered here,
rewritten, walked: Produce v10+ and Fetch v16+ whose answers may or may not hold
NodeEndpoints or walk at all; headed: Metadata, whose answers' heads the scanner
replaces when the readers rewrote the same head for the same book and generation;
acks=0) cut into reads anywhere and answered at any time, while the address book
sometimes moves. The C walk of the walked answers is held to the Python walk on its
own, over every flexible response Kafka has. The transports are stand-ins that keep
what is written (what a socket carries is the point here, and the cuts must be
chosen); the connection, readers, interceptors and scanner are the real ones. With
``KAFKA_GATEWAY_PURE_PYTHON=1`` the same tests hold the scanner's plain build to the
readers alone.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import struct
import subprocess
import sys
from collections.abc import Callable

import pytest
from kio.index import load_response_schema

from gateway.features.report import NO_FEATURES
from gateway.interceptors import addresses, dispatch
from gateway.protocol import Incomplete, InFlightRequest, Malformed, _requests, tail_program
from gateway.protocol import _scanner as scanner
from gateway.protocol._requests import RequestReader
from gateway.protocol._responses import ResponseReader
from gateway.protocol._stats import LATENCY_BUCKETS
from gateway.protocol._walk import tags_offset
from gateway.server import proxy
from gateway.server.proxy import ClientConnection, UpstreamConnection
from gateway.versions import gateway_supported
from tests.unit._connection import RecordingTransport, client_read, connected, upstream_read
from tests.unit._kafka import (
    Req,
    build,
    encode,
    frame,
    kio_response,
    produce,
    request,
    schema_module,
    top_level,
)
from tests.unit._kio_samples import sample
from tests.unit.gateway.interceptors.test_addresses import ENDPOINTS, NODE_ENDPOINT_CASES
from tests.unit.gateway.interceptors.test_addresses import fetch_response as fetch_response_with
from tests.unit.gateway.interceptors.test_addresses import produce_response as produce_response_with
from tests.unit.gateway.protocol.test_streams import api_versions, metadata, produce_response
from tests.unit.gateway.protocol.test_tagged import encode as encode_sample
from tests.unit.gateway.protocol.test_tagged import flexible_responses
from tests.unit.gateway.protocol.test_walk import cuts

DESCRIBE_GROUPS, LIST_OFFSETS = 15, 2
compiled_only = pytest.mark.skipif(not scanner.COMPILED, reason="the scanner is not compiled")


class BytesTransport(RecordingTransport):
    """Keeps the bytes written, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        super().write(data)
        self.data += data


def test_the_lane_is_compiled() -> None:
    """CI builds it (setup.py; the extension is optional only so that an install without
    a C compiler still works): a silent fallback would leave it untested."""
    if os.environ.get("KAFKA_GATEWAY_PURE_PYTHON"):
        pytest.skip("the pure-Python path was asked for")
    assert scanner.COMPILED and proxy.lane.COMPILED
    assert scanner.LATENCY_BUCKETS == LATENCY_BUCKETS


@compiled_only
def test_the_plain_table_is_the_pass_through_table_minus_rewritten_responses() -> None:
    """...plus the versions whose responses are rewritten only in their top-level
    tagged section (Produce v10+, Fetch v16+), which the lane walks, and those rewritten
    only in their head (Metadata), whose heads the lane may replace."""
    conn, _, _ = connected(RecordingTransport)
    table = conn.reads.table
    assert table is not None
    for key in range(-1, 140):
        for version in range(-1, 20):
            entry = InFlightRequest(key, version, 1)
            forwarded = (
                key < 128
                and key != 17  # SaslHandshake: raw tokens may follow
                and not conn.exchange.intercepts(key, version)
            )
            walked = (
                forwarded
                and key in addresses.TAIL_REWRITTEN
                and version >= dispatch.REWRITTEN_FROM[key]
            )
            headed = forwarded and key in addresses.HEAD_REWRITTEN
            expected = walked or headed or (forwarded and not dispatch.intercepts_response(entry))
            assert table.walked(key, version) == walked, (key, version)
            assert table.headed(key, version) == headed, (key, version)
            assert table.plain(key, version) == expected, (key, version)
    assert table.walked(0, 11) and table.walked(1, 16)  # what current clients send
    assert table.headed(3, 1) and table.headed(3, 12)


WALKED_CASES = [c for c in NODE_ENDPOINT_CASES if c[0].startswith(("produce-", "fetch-"))]


@compiled_only
@pytest.mark.parametrize("make", [c[1] for c in WALKED_CASES], ids=[c[0] for c in WALKED_CASES])
def test_the_c_walk_ends_where_the_python_walk_does(make: Callable[[list[object]], object]) -> None:
    """The lane's walk (C) runs the Python walk's program: on any bytes it either ends
    where ``tags_offset`` does, or refuses (the response then takes the Python path). On
    a broker's bytes it never refuses, or the lane would not take them."""
    rng = random.Random(1)
    refused = 0
    for endpoints in ([], ENDPOINTS):
        entity = make(endpoints)
        key, version = entity.__api_key__, entity.__version__  # type: ignore[attr-defined]
        program = tail_program(key, version)
        body = encode(entity)
        assert scanner.tail_offset(key, version, program, body) == tags_offset(key, version, body)
        for _ in range(400):
            mutated = bytearray(body)
            for _ in range(rng.randint(1, 3)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            if rng.random() < 0.3:
                del mutated[rng.randrange(len(mutated)) :]
            got = scanner.tail_offset(key, version, program, bytes(mutated))
            try:
                expected: int | None = tags_offset(key, version, mutated)
            except (Incomplete, Malformed):
                expected = None
            if got < 0:
                refused += 1
            else:
                assert got == expected, bytes(mutated).hex()
    assert refused  # the mutations reached the refusals


@compiled_only
@pytest.mark.parametrize(("key", "version"), flexible_responses())
def test_the_c_walk_runs_every_kind_of_step_as_the_python_walk(key: int, version: int) -> None:
    """Every flexible response Kafka has (nullable structs, arrays of fixed-width items
    and of strings, which Produce and Fetch lack), cut at every length and with each byte
    flipped: the C walk ends where ``tags_offset`` does, or refuses where it fails."""
    program = tail_program(key, version)
    body = encode_sample(sample(load_response_schema(key, version), fill_tags=True))
    assert scanner.tail_offset(key, version, program, body) == tags_offset(key, version, body)
    for variant in cuts(body):
        got = scanner.tail_offset(key, version, program, variant)
        if got >= 0:
            assert got == tags_offset(key, version, variant), variant.hex()


# -- the streams ---------------------------------------------------------------------------


def _describe_groups(correlation_id: int) -> Req:
    body = struct.pack(">ih", 1, 6) + b"group1"
    return request(DESCRIBE_GROUPS, 0, correlation_id, body, header_version=1)


def _list_offsets(correlation_id: int) -> Req:
    body = struct.pack(">ii", -1, 0)  # replica id, no topics
    return request(LIST_OFFSETS, 1, correlation_id, body, header_version=1)


def _fetch(version: int, correlation_id: int) -> Req:
    cls = top_level(schema_module("fetch", version, "request"))
    body = encode(build(cls, max_bytes=1 << 20, session_epoch=-1))
    return request(1, version, correlation_id, body, header_version=2)


KINDS: list[Callable[[int], Req]] = [
    _describe_groups,
    _describe_groups,
    _list_offsets,
    lambda c: produce(3, c, acks=1, transactional_id=None),
    lambda c: produce(8, c, acks=-1, transactional_id="txn", client_id=None),
    lambda c: produce(5, c, acks=0, transactional_id=None),
    lambda c: produce(9, c, acks=1, transactional_id="txn-9", tagged={3: b"x" * 20}),
    lambda c: produce(9, c, acks=0, transactional_id=None),
    lambda c: produce(11, c, acks=1, transactional_id=None),
    lambda c: produce(11, c, acks=1, transactional_id=None),
    lambda c: produce(10, c, acks=-1, transactional_id="txn-10", tagged={2: b"t"}),
    lambda c: produce(13, c, acks=-1, transactional_id=None),
    lambda c: produce(11, c, acks=0, transactional_id=None),
    lambda c: _fetch(16, c),
    lambda c: _fetch(17, c),
    lambda c: metadata(1, c),
    lambda c: metadata(1, c),
    lambda c: metadata(9, c),
    lambda c: metadata(12, c),
    lambda c: api_versions(3, c),
]


def _bad_produce(correlation_id: int) -> Req:
    """A Produce v5 whose transactional_id length is -5: the Python path closes."""
    good = produce(5, correlation_id, acks=1, transactional_id=None)
    at = 4 + 8 + 2 + len(b"producer-1")  # size, header, client_id
    return dataclasses.replace(good, frame=good.frame[:at] + b"\xff\xfb" + good.frame[at + 2 :])


# Now and then a request the Python path rejects (and closes the connection over).
RARE: list[Callable[[int], Req]] = [_bad_produce]


def _walked_answer(req: Req) -> bytes:
    """A broker's answer to a Produce v10+ or Fetch v16+: most with an empty top-level
    tagged section (forwarded as they are); some with NodeEndpoints (rewritten); some
    that do not walk (forwarded as they are, and counted as rewrite errors)."""
    variant = req.correlation_id % 6
    endpoints = ENDPOINTS if variant == 0 else []
    if req.key == 0:
        entity = produce_response_with(req.version, endpoints)
    else:
        entity = fetch_response_with("fetch", req.version, endpoints)
    answer = kio_response(req.correlation_id, entity).frame
    if variant == 1:  # a tagged section claiming a field, and nothing after
        return answer[:-1] + b"\x01"
    if variant == 2:  # the first array claims 63 items
        at = 4 + 4 + 1 + (0 if req.key == 0 else 10)  # size, id, header tags; fetch's fields
        return answer[:at] + b"\x40" + answer[at + 1 :]
    return answer


def _metadata_answer(req: Req) -> bytes:
    """A broker's answer to a Metadata request: its brokers (the head the gateway
    rewrites) mostly the same, now and then another broker's host; its topics varying;
    a few cut short inside the head (the Python path closes the connection)."""
    variant = req.correlation_id % 7
    cls = top_level(schema_module("metadata", req.version, "response"))
    entity = build(
        cls,
        brokers=[
            {"node_id": 0, "host": "broker-0" if variant != 1 else "broker-0b", "port": 9092},
            {"node_id": 1, "host": "broker-1", "port": 9092},
        ],
        topics=[
            {"name": "orders", "partitions": [{"partition_index": i, "leader_id": i % 2}]}
            for i in range(req.correlation_id % 3)
        ],
    )
    answer = kio_response(req.correlation_id, entity).frame
    if req.correlation_id % 11 == 5:  # a frame that ends in the second broker's host
        cut = answer.index(b"broker-1") + 3
        return struct.pack(">i", cut - 4) + answer[4:cut]
    return answer


def _answer(req: Req) -> bytes:
    """What a broker answers to ``req``."""
    if req.key == 3:
        return _metadata_answer(req)
    if req.key in addresses.TAIL_REWRITTEN and req.version >= dispatch.REWRITTEN_FROM[req.key]:
        return _walked_answer(req)
    if req.key == 0:
        return produce_response(req.version, req.correlation_id).frame
    return frame(
        struct.pack(">i", req.correlation_id) + b"\x00\x00" + bytes(req.correlation_id % 7)
    )


def _frames(data: bytes) -> tuple[list[int], int]:
    """Correlation ids of the whole request frames in ``data``, and where they end."""
    ids, pos = [], 0
    while len(data) - pos >= 12:
        (size,) = struct.unpack_from(">i", data, pos)
        if pos + 4 + size > len(data):
            break
        ids.append(struct.unpack_from(">i", data, pos + 8)[0])
        pos += 4 + size
    return ids, pos


def _cuts(data: bytes, rng: random.Random, whole: bool) -> list[bytes]:
    """``data`` in pieces: at frame boundaries only (``whole``), or anywhere."""
    if not data:
        return []
    if whole:
        points, pos = [0], 0
        while pos < len(data):
            pos += 4 + struct.unpack_from(">i", data, pos)[0]
            if rng.random() < 0.4 or pos == len(data):
                points.append(pos)
    else:
        inner = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 4))))
        points = [0, *inner, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


class MovingBook:
    """Node N at gw-N.example:19000+N+shift. ``move`` changes every answer (as a
    reload of advertised ports would), and so the generation."""

    def __init__(self) -> None:
        self.shift = 0
        self.generation = 0

    def move(self) -> None:
        self.shift += 100
        self.generation += 1

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        return f"gw-{node_id}.example", 19000 + node_id + self.shift


class Side:
    """One connection and the broker behind it: requests in, answers out."""

    def __init__(self, lane: bool, log_requests: float = 0.0, book: object = None) -> None:
        self.conn, self.client, self.upstream = connected(BytesTransport, log_requests=log_requests)
        if book is not None:  # both sides of a stream ask one book
            self.conn.gateway.router = book  # type: ignore[assignment]
            self.conn.gateway._negotiated.clear()  # a lane table made with this book
            self.conn.negotiated(gateway_supported(), NO_FEATURES)
        self.lane = lane
        if not lane:  # the readers alone, without the scanner
            conn = self.conn
            conn.reads.table = conn.requests.table = conn.responses.table = None
            conn.reads.scan_requests_ok = conn.reads.scan_responses_ok = False
        # The request log's lines (every request's, when log_requests is 1).
        self.logged: list[dict[str, object]] = []
        if self.conn.gateway.request_log is not None:
            self.conn.gateway.request_log._emit = lambda event, **fields: self.logged.append(
                {"event": event, **fields}
            )
        self.upstream_side = UpstreamConnection(self.conn)
        self.answered_upto = 0  # bytes of the upstream's stream already answered

    def client_read(self, data: bytes) -> None:
        if self.lane:
            proxy._RECV[: len(data)] = data
            self.conn.buffer_updated(len(data))
        else:
            client_read(self.conn, data)

    def upstream_read(self, data: bytes) -> None:
        if self.lane:
            proxy._RECV[: len(data)] = data
            self.upstream_side.buffer_updated(len(data))
        else:
            upstream_read(self.conn, data)

    def answers(self, sent: dict[int, Req], rng: random.Random | None = None) -> bytes:
        """The broker's answers to the requests it got since the last call. Kafka
        answers no acks=0 produce; with ``rng``, this broker answers them (as Tansu
        does) and now and then sends an answer to no request (a broker bug)."""
        stream = bytes(self.upstream.data)
        ids, end = _frames(stream[self.answered_upto :])
        self.answered_upto += end
        out = b""
        for i in ids:
            if sent[i].expects_response or rng is not None:
                out += _answer(sent[i])
            if rng is not None and rng.random() < 0.05:
                out += frame(struct.pack(">i", 77_777) + b"stray")
        return out


def _run(seed: int) -> tuple[Side, Side]:
    rng = random.Random(seed)
    count = rng.randint(1, 40)
    reqs = [rng.choice(RARE if rng.random() < 0.01 else KINDS)(i + 1) for i in range(count)]
    sent = {r.correlation_id: r for r in reqs}
    whole = rng.random() < 0.6  # clients mostly write whole requests
    pieces = _cuts(b"".join(r.frame for r in reqs), rng, whole)
    log_requests = 1.0 if rng.random() < 0.3 else 0.0
    book = MovingBook()
    sides = (
        Side(lane=True, log_requests=log_requests, book=book),
        Side(lane=False, log_requests=log_requests, book=book),
    )
    odd_broker = rng.random() < 0.3
    pending = b""
    for piece in pieces:
        if rng.random() < 0.1:
            book.move()  # what the lane remembered must no longer hold
        for side in sides:
            side.client_read(piece)
        answers = [
            side.answers(sent, random.Random(seed) if odd_broker else None) for side in sides
        ]
        assert answers[0] == answers[1]
        pending += answers[0]
        if pending and rng.random() < 0.6:
            for part in _cuts(pending, rng, whole=rng.random() < 0.6):
                for side in sides:
                    side.upstream_read(part)
            pending = b""
    answers = [side.answers(sent, random.Random(seed) if odd_broker else None) for side in sides]
    assert answers[0] == answers[1]
    pending += answers[0]
    for part in _cuts(pending, rng, whole=rng.random() < 0.6):
        for side in sides:
            side.upstream_read(part)
    return sides


def _counts(conn: ClientConnection) -> tuple[object, ...]:
    conn.traffic.fold()  # the lane's counts into the ApiStats, then into the metrics
    metrics = conn.gateway.metrics
    traffic = metrics.traffic
    conn.traffic.sync()
    info = conn.info
    return (
        {name: metrics.rewrite_errors.labels(name)._value.get() for name in ("Produce", "Fetch")},
        dict(traffic.requests),
        dict(traffic.responses),
        {key: sum(histogram[1:]) for key, histogram in traffic.latency.items()},
        conn.in_flight(),
        conn.reads.bytes_in,
        conn.reads.bytes_out,
        conn.requests.frames,
        info and (info.requests, info.bytes_in, info.bytes_out),
    )


@pytest.mark.parametrize("seed", range(300))
def test_the_lane_and_the_python_path_send_and_count_the_same(seed: int) -> None:
    lane, python = _run(seed)
    assert bytes(lane.upstream.data) == bytes(python.upstream.data)
    assert bytes(lane.client.data) == bytes(python.client.data)
    assert _counts(lane.conn) == _counts(python.conn)
    assert lane.conn.in_flight() == 0 or lane.conn.closed
    assert lane.conn.closed == python.conn.closed
    # The request log (on in some streams) has the same lines but for the latencies.
    for line in (*lane.logged, *python.logged):
        assert isinstance(line.pop("latency_ms"), float)
    assert lane.logged == python.logged


def _fed(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The readers each read goes to, from now on (the Python path's reads)."""
    fed: list[object] = []
    for reader in (RequestReader, ResponseReader):

        def feed(self: object, data: bytes, _feed: Callable[..., object] = reader.feed) -> object:
            fed.append(self)
            return _feed(self, data)

        monkeypatch.setattr(reader, "feed", feed)
    return fed


@compiled_only
@pytest.mark.parametrize("log_requests", [0.0, 0.5])
def test_plain_requests_in_whole_reads_never_leave_the_lane(
    log_requests: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DescribeGroups, pipelined eight a read, answered eight a read: the Python path
    sees none of them, and an idle connection keeps no ring. With the request log on,
    the lane logs the answers it samples (the log lines themselves: see above)."""
    side = Side(lane=True, log_requests=log_requests)
    fed = _fed(monkeypatch)
    reqs = [_describe_groups(i) for i in range(1, 65)]
    sent = {r.correlation_id: r for r in reqs}
    for start in range(0, 64, 8):
        side.client_read(b"".join(r.frame for r in reqs[start : start + 8]))
        side.upstream_read(side.answers(sent))
    conn = side.conn
    assert (len(side.logged) > 0) == bool(log_requests) and len(side.logged) < 64
    assert conn.inflight.counts.frames == 64 and conn.requests.frames == 64
    assert len(conn.inflight) == 0 and conn.inflight.entries == []
    assert fed == []  # nothing went the readers' way
    stats = conn.inflight.fold()
    assert stats.requests == {(DESCRIBE_GROUPS, 0): 64}
    assert stats.responses == {(DESCRIBE_GROUPS, 0): 64}
    assert side.client.data == b"".join(_answer(r) for r in reqs)


HEADER_TAGS = {3: b"x" * 20, 7: b""}


@compiled_only
@pytest.mark.parametrize(
    ("version", "tagged"),
    [(3, None), (8, None), (9, None), (9, HEADER_TAGS), (11, HEADER_TAGS), (13, HEADER_TAGS)],
)
def test_the_lane_reads_acks_past_every_produce_header(
    version: int, tagged: dict[int, bytes] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """acks sits after the client id, from v9 the header's tagged fields, and the
    transactional id: the lane takes the produces whose acks is not 0 and leaves those
    with acks=0 to the Python path. (Misread, acks only ever sends a request the
    Python path's way or keeps it in the lane; this checks it is read right.)"""
    side = Side(lane=True)
    conn = side.conn
    kept = [
        produce(version, 1, acks=1, transactional_id=None, tagged=tagged),
        produce(version, 2, acks=-1, transactional_id="txn-" + "t" * 130, tagged=tagged),
        produce(version, 3, acks=1, transactional_id="txn", client_id=None, tagged=tagged),
    ]
    fed = _fed(monkeypatch)
    side.client_read(b"".join(r.frame for r in kept))
    assert fed == [] and conn.requests.frames == 3
    side.client_read(produce(version, 4, acks=0, transactional_id="txn", tagged=tagged).frame)
    assert fed == [conn.requests] and conn.requests.frames == 4


@compiled_only
def test_the_scanner_and_the_readers_share_one_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A FindCoordinator request (its answer gathered and rewritten) goes to the
    readers, between requests the scanner took, in one table and in order; once the
    readers answered it, the scanner takes the answers behind it."""
    side = Side(lane=True)
    conn = side.conn
    find = request(10, 1, 2, struct.pack(">h", 6) + b"group1" + b"\x00", header_version=1)
    reqs = [_describe_groups(1), find, _describe_groups(3), _describe_groups(4)]
    sent = {r.correlation_id: r for r in reqs}
    taken: list[int] = []  # by the scanner the reader calls

    def scan(*args: object, _scan: Callable[..., int] = _requests.scan_requests) -> int:
        taken.append(_scan(*args))
        return taken[-1]

    monkeypatch.setattr(_requests, "scan_requests", scan)
    side.client_read(reqs[0].frame)
    assert conn.requests.frames == 1 and taken == []  # the lane's
    side.client_read(b"".join(r.frame for r in reqs[1:]))  # FindCoordinator: the reader's
    assert [e.correlation_id for e in conn.inflight.entries] == [1, 2, 3, 4]
    assert conn.requests.frames == 4
    assert sum(taken) == len(reqs[2].frame + reqs[3].frame)  # the scanner took the two after it
    answers = side.answers(sent)
    first_two = 4 + struct.unpack_from(">i", answers, 0)[0]
    first_two += 4 + struct.unpack_from(">i", answers, first_two)[0]
    side.upstream_read(answers[:first_two])  # DescribeGroups and FindCoordinator answered
    assert [e.correlation_id for e in conn.inflight.entries] == [3, 4]
    assert conn.reads.scan_responses_ok
    side.upstream_read(answers[first_two:])
    assert conn.in_flight() == 0
    assert conn.inflight.fold().responses == {(DESCRIBE_GROUPS, 0): 3, (10, 1): 1}


@compiled_only
@pytest.mark.parametrize("version", [1, 12])
def test_the_lane_replaces_a_metadata_head_the_python_path_rewrote(
    version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first Metadata answer takes the Python path, which rewrites its head; an
    answer that starts with the same head the lane rewrites itself, the same way, until
    the book's generation moves on."""
    book = MovingBook()
    lane, python = Side(lane=True, book=book), Side(lane=False, book=book)
    fed = _fed(monkeypatch)
    # Correlation ids 3, 10, 17: the same brokers (see _metadata_answer), 0-2 topics.
    for round_, correlation_id in enumerate((3, 10, 17, 24)):
        if round_ == 3:
            book.move()
        req = metadata(version, correlation_id)
        for side in (lane, python):
            side.client_read(req.frame)
            side.upstream_read(side.answers({correlation_id: req}))
        assert lane.client.data == python.client.data
        assert b"gw-1.example" in lane.client.data
        python_read = sum(reader is lane.conn.responses for reader in fed)
        # The lane took every answer but the first, and the first after the move.
        assert python_read == (1 if round_ < 3 else 2), round_
        assert lane.conn.in_flight() == 0


@compiled_only
def test_the_python_path_alone_passes_the_connection_tests() -> None:
    """KAFKA_GATEWAY_PURE_PYTHON=1 (and an install without a C compiler) runs every read
    through the Python path: the connection-level tests pass there too."""
    env = {**os.environ, "KAFKA_GATEWAY_PURE_PYTHON": "1"}
    tests = [
        "tests/unit/gateway/protocol/test_lane.py",
        "tests/unit/gateway/server/test_client_writes.py",
        "tests/unit/gateway/server/test_read_slices.py",
        "-k",
        "not python_path_alone",
    ]
    check = "import gateway.server.proxy as p, sys; sys.exit(p.lane.COMPILED)"
    assert subprocess.run([sys.executable, "-c", check], env=env).returncode == 0
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_fork_server_makes_every_walk_program_a_worker_uses() -> None:
    """``dispatch.warm_up`` runs in the fork server: a program a worker made itself would
    walk the schemas' objects and so copy their shared pages (0.25 MB a worker)."""
    tail_program.cache_clear()
    dispatch.warm_up.__wrapped__()  # as in a fresh fork server (warm_up runs once)
    made = tail_program.cache_info().misses
    walks = dispatch.lane_walks(gateway_supported())
    assert (0, 11) in walks and (1, 16) in walks
    assert tail_program.cache_info().misses == made
