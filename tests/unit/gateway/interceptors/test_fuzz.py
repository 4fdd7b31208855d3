"""Fuzzing the sans-I/O core and every interceptor with hypothesis (briefly, in the suite).

Byte streams — random, and valid frames mutated (bytes flipped, cut, lengths and
varints broken, array lengths made huge) — go through the readers and then through the
interceptors the way ``gateway.server.proxy`` calls them. The property is the gateway's
promise for bad input: no exception escapes where the proxy does not catch one, a reader
stops at a ProtocolViolation and emits nothing after it, and no more bytes are forwarded
than came in. ``bench/fuzz_gateway.py`` throws a million such frames at a live gateway.
"""

from __future__ import annotations

import contextlib
import itertools
import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.update_features.v1.request import FeatureUpdateKey

from gateway.interceptors import upstream as internal
from gateway.interceptors.addresses import REWRITTEN_RESPONSES, rewrite_response, rewrite_tail
from gateway.interceptors.api_versions import add_broker_software, answer_api_versions
from gateway.interceptors.describe_cluster import add_software_per_broker
from gateway.interceptors.unsupported import unsupported_version_response
from gateway.interceptors.update_features import parse_update_features, update_features_response
from gateway.protocol import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    FETCH,
    METADATA,
    UPDATE_FEATURES,
    InFlight,
    ProtocolViolation,
    RequestFrame,
    RequestHeader,
    RequestReader,
    ResponseFrame,
    ResponseReader,
    ResponseTail,
    TailFinder,
    api_spec,
    response_body_offset,
)
from gateway.versions import parse_api_versions_response
from tests.unit._kafka import frame, kio_request, kio_response, schema_module, top_level
from tests.unit._kio_samples import sample
from tests.unit.gateway.protocol.test_streams import api_versions, metadata, metadata_response
from tests.unit.gateway.protocol.test_streams import produce as produce_request

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same examples on every run: a red CI run is reproducible
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MAX_FRAME = 1 << 16
RANGES = {k: (0, 20) for k in range(0, 100)}


class Book:
    """An AddressBook that moves every broker to the gateway."""

    generation = 0  # its answers never change

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        return "gw.example", 9092 + node_id


BOOK = Book()


def _describe_cluster_request(version: int, cid: int) -> bytes:
    return kio_request(
        "describe_cluster", version, cid, include_cluster_authorized_operations=False
    ).frame


def _update_features(cid: int) -> bytes:
    updates = (FeatureUpdateKey(feature="x.version", max_version_level=1),)
    return kio_request(
        "update_features", 1, cid, feature_updates=updates, validate_only=False
    ).frame


SEED_REQUESTS = [
    api_versions(3, 1).frame,
    api_versions(0, 2).frame,
    metadata(12, 3).frame,
    metadata(1, 4).frame,
    produce_request(9, 5, acks=1, transactional_id="t").frame,
    produce_request(3, 6, acks=0, transactional_id=None).frame,
    _update_features(7),
    _describe_cluster_request(1, 8),
]


def _sample_response(api: str, version: int, cid: int) -> bytes:
    return kio_response(cid, sample(top_level(schema_module(api, version, "response")))).frame


SEED_RESPONSES = [
    metadata_response(12, 1).frame,
    _sample_response("fetch", 16, 2),
    _sample_response("describe_cluster", 1, 3),
    _sample_response("find_coordinator", 4, 4),
    _sample_response("produce", 10, 5),
    _sample_response("metadata", 9, 6),
]
# (api_key, version) the response seeds answer, in order: the in-flight table's entries.
RESPONSE_KEYS = [(METADATA, 12), (FETCH, 16), (DESCRIBE_CLUSTER, 1), (10, 4), (0, 10), (3, 9)]


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """Valid frames with a few of the mutations malformed input is made of."""
    frames = draw(st.lists(st.sampled_from(seeds), min_size=1, max_size=6))
    data = bytearray(b"".join(frames))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "length", "varint", "huge"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[pos] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[pos : pos + draw(st.integers(1, 64))]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "length" and len(data) >= pos + 4:
            data[pos : pos + 4] = struct.pack(">i", draw(st.integers(-(2**31), 2**31 - 1)))
        elif kind == "varint":  # a varint that never ends, or one far too long
            data[pos:pos] = b"\xff" * draw(st.integers(1, 12))
        elif kind == "huge" and len(data) >= pos + 4:  # an array announcing 2**31-1 items
            data[pos : pos + 4] = b"\x7f\xff\xff\xff"
    return bytes(data)


def streams(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=512), mutated(seeds))


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def _intercept_request(key: int, version: int) -> bool:
    # As the proxy: the APIs it answers itself, and versions outside the ranges.
    return key in (API_VERSIONS, UPDATE_FEATURES, DESCRIBE_CLUSTER) or version > 12


def handle_request(item: RequestFrame) -> None:
    """What gateway.interceptors.dispatch.on_request does with an intercepted frame."""
    header = item.header
    body = memoryview(item.frame)[4 + header.body_offset :]
    if header.api_key == API_VERSIONS:
        answer = answer_api_versions(header, body, RANGES)
        assert isinstance(answer.payload, bytes)
    elif header.api_key == UPDATE_FEATURES and api_spec(UPDATE_FEATURES) is not None:
        if not 0 <= header.api_version <= 2:
            return
        try:
            parse_update_features(header.api_version, body)
        except ValueError:  # answered INVALID_REQUEST by the proxy
            update_features_response(header, [], error_code=42, error_message="bad")
    elif header.api_key == DESCRIBE_CLUSTER and 0 <= header.api_version <= 2:
        _describe_cluster(header, bytes(body))
    else:
        unsupported_version_response(header, body)


def _metadata_12_body() -> bytes:
    payload = metadata_response(12, 1).frame[4:]
    spec = api_spec(METADATA)
    assert spec is not None
    return payload[response_body_offset(payload, spec.response_header_version(12)) :]


METADATA_12_BODY = _metadata_12_body()


def _describe_cluster(header: Any, body: bytes) -> None:
    try:
        asked = internal.parse_describe_cluster_request(header.api_version, body)
    except ValueError:  # the proxy closes the connection, as Kafka does
        return
    internal.describe_cluster_from_metadata(header, asked, 12, METADATA_12_BODY, BOOK)


def feed(reader: RequestReader | ResponseReader, pieces: list[bytes]) -> list[Any]:
    items: list[Any] = []
    for piece in pieces:
        out = reader.feed(piece)
        if items and isinstance(items[-1], ProtocolViolation):
            assert out == [], "a reader emitted items after a protocol violation"
        items += out
    return items


def forwarded_size(items: list[Any]) -> int:
    return sum(len(i) for i in items if isinstance(i, bytes | memoryview))


@FUZZ
@given(data=streams(SEED_REQUESTS), cuts=st.lists(st.integers(0, 4096), max_size=8))
def test_request_side_survives_malformed_and_mutated_frames(data: bytes, cuts: list[int]) -> None:
    reader = RequestReader(InFlight(), _intercept_request, MAX_FRAME)
    items = feed(reader, chunked(data, cuts))
    assert forwarded_size(items) <= len(data)
    for item in items:
        if isinstance(item, RequestFrame):
            handle_request(item)


def _intercept_response(entry: Any) -> bool:
    return entry.api_version >= REWRITTEN_RESPONSES.get(entry.api_key, 1 << 15)


def _tail_policy(entry: Any, size: int) -> TailFinder | None:
    return TailFinder(FETCH, entry.api_version) if entry.api_key == FETCH else None


@FUZZ
@given(data=streams(SEED_RESPONSES), cuts=st.lists(st.integers(0, 4096), max_size=8))
def test_response_side_survives_malformed_and_mutated_frames(data: bytes, cuts: list[int]) -> None:
    inflight = InFlight()
    for cid, (key, version) in enumerate(RESPONSE_KEYS, start=1):
        inflight.add(key, version, cid)
    reader = ResponseReader(inflight, _intercept_response, MAX_FRAME, _tail_policy)
    items = feed(reader, chunked(data, cuts))
    assert forwarded_size(items) <= len(data)
    for item in items:
        # The proxy catches every exception of a rewrite (a broker bug must not cost the
        # client its response); the rewrites must still not hang or loop.
        if isinstance(item, ResponseFrame):
            entry = item.request
            spec = api_spec(entry.api_key)
            assert spec is not None
            payload = memoryview(item.frame)[4:]
            try:
                offset = response_body_offset(
                    payload, spec.response_header_version(entry.api_version)
                )
                body = rewrite_response(entry.api_key, entry.api_version, payload[offset:], BOOK)
                if entry.api_key == DESCRIBE_CLUSTER:
                    add_software_per_broker(entry.api_version, bytes(body), lambda _: None)
                    add_broker_software(DESCRIBE_CLUSTER, entry.api_version, bytes(body), None)
            except Exception:
                pass
        elif isinstance(item, ResponseTail):
            entry = item.request
            try:
                result = rewrite_tail(
                    entry.api_key, entry.api_version, item.tail, BOOK, keep_length=True
                )
            except Exception:
                continue
            assert len(result.tail) == len(item.tail)


@FUZZ
@given(
    body=st.one_of(st.binary(max_size=256), mutated([METADATA_12_BODY])), version=st.integers(0, 4)
)
def test_upstream_api_versions_parser_raises_only_value_errors(body: bytes, version: int) -> None:
    # The proxy catches ValueError (ApiVersionsError is one) and closes that connection.
    with contextlib.suppress(ValueError):
        parse_api_versions_response(body, version)


def _bodies() -> list[tuple[int, int, bytes]]:
    """(key, version, body) of every intercepted request seed: headers stay intact."""
    out = []
    for data in SEED_REQUESTS:
        items = RequestReader(InFlight(), lambda k, v: True).feed(data)
        [item] = items
        assert isinstance(item, RequestFrame)
        h = item.header
        out.append((h.api_key, h.api_version, item.frame[4 + h.body_offset :]))
    return out


BODIES = _bodies()


@FUZZ
@given(
    seed=st.sampled_from(BODIES),
    body=st.data(),
    version_shift=st.sampled_from([0, 0, 0, 1, -1, 50]),
)
def test_every_request_interceptor_survives_a_malformed_body(
    seed: tuple[int, int, bytes], body: st.DataObject, version_shift: int
) -> None:
    key, version, valid = seed
    mangled = body.draw(st.one_of(st.binary(max_size=128), mutated([valid])))
    payload = struct.pack(">hhi", key, version + version_shift, 1) + b"\xff\xff"
    spec = api_spec(key)
    if spec is not None and spec.request_header_version(version + version_shift) >= 2:
        payload += b"\x00"
    reader = RequestReader(InFlight(), lambda k, v: True)
    for item in reader.feed(frame(payload + mangled)):
        if isinstance(item, RequestFrame):
            handle_request(item)


def test_a_claimed_array_length_beyond_the_body_is_refused_before_kio_allocates() -> None:
    # Found by bench/fuzz_gateway.py: kio's native reader sized an allocation from a
    # claimed array length (2**31-1 items) and the gateway process aborted.
    huge = b"\xff\xff\xff\xff\x07"  # uvarint 2**31-1: a compact array of 2**31-2 items
    body = struct.pack(">i", 30000) + huge
    try:
        parse_update_features(1, body)
    except ValueError as exc:
        assert "does not fit its schema" in str(exc)
    else:
        raise AssertionError("a body claiming 2**31 items decoded")
    answer = answer_api_versions(RequestHeader(API_VERSIONS, 3, 1, None, 10), huge, RANGES)
    assert answer.error_code == 42  # INVALID_REQUEST, the connection stays


def test_a_null_feature_updates_array_is_an_invalid_request() -> None:
    # Found by bench/fuzz_gateway.py: a compact array length of 0 (null) raised TypeError.
    body = struct.pack(">i", 30000) + b"\x00" + b"\x00" + b"\x00"  # null array, flag, tags
    try:
        parse_update_features(1, body)
    except ValueError as exc:
        assert "null" in str(exc)
    else:
        raise AssertionError("a null FeatureUpdates array decoded")


# -- bridged connections (gateway.bridge) -------------------------------------------------
# Requests at the versions Kafka 4 removed, as dispatch hands them to the bridge: every
# bridged API at every removed version (spec-random bodies, whose records are garbage
# message sets), and Produce v0-2 with real message sets (magic 0 and 1, gzip), mutated
# and cut; then each converted request's answer, garbage or a mutated valid one.
def _bridge_seeds() -> tuple[list[bytes], dict[tuple[int, int], list[bytes]]]:
    import random

    from kafka.record.memory_records import MemoryRecordsBuilder

    from gateway.bridge import messages
    from gateway.kafka_client import request_frame
    from tests.unit.gateway.bridge.test_messages import _random
    from tests.unit.gateway.interceptors.test_bridging import KAFKA_44

    rng = random.Random("bridge")
    requests: list[bytes] = []
    answers: dict[tuple[int, int], list[bytes]] = {}
    for key, bridged in sorted(bridge_plan.plans(KAFKA_44).items()):
        name = api_spec(key).name  # type: ignore[union-attr]
        for version in range(bridged.oldest, bridged.target):
            values = _random(rng, messages.schema(f"{name}Request", version))
            body = messages.encode(f"{name}Request", version, values)
            requests.append(request_frame(key, version, len(requests) + 1, body, "old"))
        answer = messages.schema(f"{name}Response", bridged.target)
        answers[(key, bridged.target)] = [
            messages.encode(f"{name}Response", bridged.target, _random(rng, answer))
            for _ in range(2)
        ]
    # The last: a gzip bomb (80 MB of zeros in ~80 KB), which the bridge refuses.
    for version, magic, compression, size in (
        (0, 0, 0, 0),
        (1, 0, 1, 0),
        (2, 1, 0, 0),
        (2, 1, 1, 0),
        (2, 1, 1, 80 << 20),
    ):
        builder = MemoryRecordsBuilder(magic, compression, 1 << 30)
        for i in range(3):
            builder.append(
                timestamp=1000 + i, key=b"k", value=b"v%d" % i * 20 + bytes(size * (i == 0))
            )
        builder.close()
        partition = {"Index": 0, "Records": bytes(builder.buffer())}
        values = {
            "Acks": -1,
            "TimeoutMs": 100,
            "TopicData": [{"Name": "t", "PartitionData": [partition]}],
        }
        body = messages.encode("ProduceRequest", version, values)
        requests.append(request_frame(0, version, 900 + version, body, "old"))
    return requests, answers


from gateway.bridge import plan as bridge_plan  # noqa: E402

BRIDGE_REQUESTS, BRIDGE_ANSWERS = _bridge_seeds()
# Memory a bridged request and its answer may take, at most: a fixed allowance and a
# multiple of the bytes that came in (decoded messages are dicts: ~100 bytes an element).
BRIDGE_MEMORY = (4 << 20, 400)


def _held_back(key: int, version: int) -> bool:
    from tests.unit.gateway.interceptors.test_bridging import KAFKA_44

    bridged = bridge_plan.plans(KAFKA_44).get(key)
    return bridged is not None and bridged.carries(version)


@FUZZ
@given(
    data=streams(BRIDGE_REQUESTS),
    cuts=st.lists(st.integers(0, 4096), max_size=8),
    answer=st.data(),
)
def test_bridged_requests_and_their_answers_survive_malformed_bytes(
    data: bytes, cuts: list[int], answer: Any
) -> None:
    import tracemalloc

    from tests.unit.gateway.interceptors.test_bridging import FakeExchange, carry

    reader = RequestReader(InFlight(), _held_back, 4 * MAX_FRAME)  # the bomb's size
    items = feed(reader, chunked(data, cuts))
    assert forwarded_size(items) <= len(data)
    for item in items:
        if not isinstance(item, RequestFrame) or not _held_back(
            item.header.api_key, item.header.api_version
        ):
            continue
        ctx = FakeExchange()
        body = memoryview(item.frame)[4 + item.header.body_offset :]
        tracemalloc.start()
        try:
            assert carry(ctx, item, body)
            if ctx.violations:  # malformed: closed, as Kafka closes, and nothing sent
                assert ctx.closed and not ctx.sent and not ctx.unanswered
                continue
            assert len(ctx.sent) + len(ctx.unanswered) == 1
            if not ctx.handlers:
                continue
            target = ctx.sent[0][0]
            seeds = BRIDGE_ANSWERS[(item.header.api_key, target)]
            reply = answer.draw(st.one_of(st.binary(max_size=256), mutated(seeds)))
            ctx.handlers[0](memoryview(struct.pack(">i", -5) + reply))
            assert ctx.answers or ctx.closed  # an answer it cannot bring down: closed
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        allowance, ratio = BRIDGE_MEMORY
        assert peak <= allowance + ratio * (len(item.frame) + len(reply)), peak


def test_a_bridged_gzip_bomb_is_refused_within_bounded_memory() -> None:
    """The seeds' bomb as sent: the bridge measures what it would inflate and closes."""
    import tracemalloc

    from tests.unit.gateway.interceptors.test_bridging import FakeExchange, carry

    bomb = BRIDGE_REQUESTS[-1]
    (item,) = RequestReader(InFlight(), _held_back, 4 * MAX_FRAME).feed(bomb)
    assert isinstance(item, RequestFrame) and len(bomb) < 100_000
    ctx = FakeExchange()
    tracemalloc.start()
    try:
        body = memoryview(item.frame)[4 + item.header.body_offset :]
        assert carry(ctx, item, body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ctx.violations == ["malformed_request"] and ctx.closed and not ctx.sent
    allowance, ratio = BRIDGE_MEMORY
    assert peak <= allowance + ratio * len(bomb), peak
