"""UNSUPPORTED_VERSION responses in the requested version's schema, for every API kio knows."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import struct
import uuid
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from gateway.interceptors.unsupported import unsupported_version_response
from gateway.protocol import RequestHeader, api_spec
from gateway.protocol._apis import has_schema
from tests.unit._kio_samples import sample

CORRELATION_ID = 4242
UNSUPPORTED = ErrorCode.unsupported_version


def encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def answer(key: int, version: int, request: Any) -> bytes | None:
    header = RequestHeader(key, version, CORRELATION_ID, "test", 0)
    return unsupported_version_response(header, encode(request))


def decode_answer(key: int, version: int, payload: bytes | None) -> Any:
    """Check the response header by hand, then decode the body with kio."""
    assert payload is not None
    assert struct.unpack_from(">i", payload)[0] == CORRELATION_ID
    flexible = load_response_schema(key, version).__flexible__
    offset = 4
    if flexible and key != 18:  # response header v1: an empty tagged section
        assert payload[4] == 0
        offset = 5
    body = payload[offset:]
    entity, size = entity_reader(load_response_schema(key, version))(body, 0)
    assert size == len(body)
    return entity


def error_codes(entity: Any, path: str = "") -> list[tuple[str, int]]:
    """Every error-code field in a decoded response, with its path."""
    found = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.metadata.get("kafka_type") == "error_code":
            found.append((path + f.name, int(value)))
        elif isinstance(value, tuple):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    found += error_codes(item, f"{path}{f.name}[{i}].")
        elif dataclasses.is_dataclass(value):
            found += error_codes(value, f"{path}{f.name}.")
    return found


def every_pair() -> list[tuple[int, int]]:
    pairs = []
    for key in sorted(api_key_map):  # every API the codec (kio) has
        for version in sorted(schema_name_map[api_key_map[key]]):
            if has_schema(key, version, EntityType.request) and has_schema(
                key, version, EntityType.response
            ):
                pairs.append((key, version))
    return pairs


PAIRS = every_pair()


def test_the_sweep_covers_every_api() -> None:
    assert len({key for key, _ in PAIRS}) == len(api_key_map)
    assert len(PAIRS) > 250


@pytest.mark.parametrize(("key", "version"), PAIRS)
def test_every_api_and_version(key: int, version: int) -> None:
    request = sample(load_request_schema(key, version))  # one item in every list
    if key == 0:
        request = dataclasses.replace(request, acks=i16(1))
    message = decode_answer(key, version, answer(key, version, request))
    top_level = [
        f.name for f in dataclasses.fields(message) if f.metadata.get("kafka_type") == "error_code"
    ]
    for name in top_level:
        assert getattr(message, name) == UNSUPPORTED, name
    # Every error code anywhere (mirrored topics, partitions, groups...) is 35 too.
    codes = error_codes(message)
    assert all(code == 35 for _, code in codes), codes
    if "error_message" in {f.name for f in dataclasses.fields(message)}:
        assert f"v{version} is not supported" in (message.error_message or "")


# --- targeted ----------------------------------------------------------------------------


def build(key: int, version: int, kind: str, name: str) -> type:
    schema = (load_request_schema if kind == "request" else load_response_schema)(key, version)
    return getattr(importlib.import_module(schema.__module__), name)


def produce_request(version: int, acks: int = -1) -> Any:
    cls = load_request_schema(0, version)
    topic_cls = build(0, version, "request", "TopicProduceData")
    partition_cls = build(0, version, "request", "PartitionProduceData")
    ident = (
        (lambda n: {"topic_id": uuid.UUID(int=n)})
        if version >= 13
        else (lambda n: {"name": f"t{n}"})
    )
    topics = tuple(
        topic_cls(
            **ident(n),
            partition_data=tuple(partition_cls(index=i32(p), records=None) for p in parts),
        )
        for n, parts in ((1, (0, 1)), (2, (5,)))
    )
    return cls(
        transactional_id=None,
        acks=i16(acks),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=topics,
    )


@pytest.mark.parametrize("version", [3, 9, 12, 13])
def test_produce_mirrors_every_partition(version: int) -> None:
    message = decode_answer(0, version, answer(0, version, produce_request(version)))
    got = []
    for topic in message.responses:
        ident = topic.topic_id if version >= 13 else topic.name
        for p in topic.partition_responses:
            got.append((ident, p.index, p.error_code, p.base_offset))
    t1, t2 = (uuid.UUID(int=1), uuid.UUID(int=2)) if version >= 13 else ("t1", "t2")
    assert got == [
        (t1, 0, UNSUPPORTED, -1),
        (t1, 1, UNSUPPORTED, -1),
        (t2, 5, UNSUPPORTED, -1),
    ]


def test_produce_with_acks_0_gets_no_response() -> None:
    assert answer(0, 9, produce_request(9, acks=0)) is None


def fetch_request(version: int) -> Any:
    cls = load_request_schema(1, version)
    topic_cls = build(1, version, "request", "FetchTopic")
    partition_cls = build(1, version, "request", "FetchPartition")
    ident = {"topic_id": uuid.UUID(int=9)} if version >= 13 else {"topic": "orders"}
    partitions = tuple(
        partition_cls(partition=i32(p), fetch_offset=i64(100), partition_max_bytes=i32(1 << 20))
        for p in (0, 3)
    )
    return cls(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
        min_bytes=i32(1),
        topics=(topic_cls(**ident, partitions=partitions),),
        forgotten_topics_data=(),
    )


@pytest.mark.parametrize("version", [12, 13, 18])
def test_fetch_has_top_level_and_per_partition_errors(version: int) -> None:
    message = decode_answer(1, version, answer(1, version, fetch_request(version)))
    assert message.error_code == UNSUPPORTED
    assert message.session_id == 0  # Kafka's INVALID_SESSION_ID
    (topic,) = message.responses
    assert (topic.topic_id if version >= 13 else topic.topic) == (
        uuid.UUID(int=9) if version >= 13 else "orders"
    )
    assert [(p.partition_index, p.error_code, p.high_watermark) for p in topic.partitions] == [
        (0, UNSUPPORTED, -1),
        (3, UNSUPPORTED, -1),
    ]
    assert all(p.records is None and p.preferred_read_replica == -1 for p in topic.partitions)


def metadata_request(version: int, names: tuple[str, ...] | None) -> Any:
    topic_cls = build(3, version, "request", "MetadataRequestTopic")
    topics = None if names is None else tuple(sample(topic_cls, name=n) for n in names)
    return sample(load_request_schema(3, version), topics=topics)


@pytest.mark.parametrize("version", [4, 9, 12])
def test_metadata_mirrors_topics_and_lists_no_brokers(version: int) -> None:
    message = decode_answer(3, version, answer(3, version, metadata_request(version, ("a", "b"))))
    assert "error_code" not in {f.name for f in dataclasses.fields(message)}  # none before v13
    assert message.brokers == ()
    assert [(t.name, t.error_code, t.partitions) for t in message.topics] == [
        ("a", UNSUPPORTED, ()),
        ("b", UNSUPPORTED, ()),
    ]
    assert message.controller_id == -1


def test_metadata_v13_has_a_top_level_error() -> None:
    message = decode_answer(3, 13, answer(3, 13, metadata_request(13, ("a",))))
    assert message.error_code == UNSUPPORTED
    assert [(t.name, t.error_code) for t in message.topics] == [("a", UNSUPPORTED)]


def test_metadata_for_all_topics_lists_none() -> None:
    message = decode_answer(3, 12, answer(3, 12, metadata_request(12, None)))
    assert message.topics == ()


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_find_coordinator_single(version: int) -> None:
    cls = load_request_schema(10, version)
    kwargs: dict[str, Any] = {"key": "group-1"}
    if version >= 1:
        kwargs["key_type"] = i8(0)
    message = decode_answer(10, version, answer(10, version, cls(**kwargs)))
    assert message.error_code == UNSUPPORTED
    assert (message.node_id, message.host, message.port) == (-1, "", -1)
    if version >= 1:
        assert "FindCoordinator v" in message.error_message


@pytest.mark.parametrize("version", [4, 5, 6])
def test_find_coordinator_batched_mirrors_keys(version: int) -> None:
    cls = load_request_schema(10, version)
    request = cls(key_type=i8(0), coordinator_keys=("g1", "g2"))
    message = decode_answer(10, version, answer(10, version, request))
    assert [(c.key, c.error_code, c.node_id, c.port) for c in message.coordinators] == [
        ("g1", UNSUPPORTED, -1, -1),
        ("g2", UNSUPPORTED, -1, -1),
    ]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster(version: int) -> None:
    request = sample(load_request_schema(60, version))
    message = decode_answer(60, version, answer(60, version, request))
    assert message.error_code == UNSUPPORTED
    assert "DescribeCluster v" in message.error_message
    assert message.brokers == ()
    assert message.controller_id == -1
    assert message.cluster_id == ""


def test_offset_fetch_mirrors_groups_topics_and_partition_indexes() -> None:
    version = 8
    cls = load_request_schema(9, version)
    group_cls = build(9, version, "request", "OffsetFetchRequestGroup")
    topic_cls = build(9, version, "request", "OffsetFetchRequestTopics")
    request = cls(
        groups=(
            group_cls(
                group_id="g", topics=(topic_cls(name="t", partition_indexes=(i32(0), i32(2))),)
            ),
        ),
        require_stable=False,
    )
    message = decode_answer(9, version, answer(9, version, request))
    (group,) = message.groups
    assert (group.group_id, group.error_code) == ("g", UNSUPPORTED)
    (topic,) = group.topics
    assert topic.name == "t"
    assert [(p.partition_index, p.error_code, p.committed_offset) for p in topic.partitions] == [
        (0, UNSUPPORTED, -1),
        (2, UNSUPPORTED, -1),
    ]


def test_list_groups_does_not_mistake_filters_for_groups() -> None:
    cls = load_request_schema(16, 5)
    request = cls(states_filter=("Stable",), types_filter=("classic",))
    message = decode_answer(16, 5, answer(16, 5, request))
    assert message.error_code == UNSUPPORTED
    assert message.groups == ()


# --- no response -------------------------------------------------------------------------


def test_unknown_key_gets_none() -> None:
    assert unsupported_version_response(RequestHeader(1000, 0, 1, "c", 0), b"") is None


def test_version_without_schema_gets_none() -> None:
    spec = api_spec(0)
    assert spec is not None
    for version in (spec.min_version - 1, spec.max_version + 1, 99):
        assert unsupported_version_response(RequestHeader(0, version, 1, "c", 0), b"") is None


@pytest.mark.parametrize("body", [b"", b"\x00", b"\xff\xff\xff\xff\xff"])
def test_undecodable_request_gets_none(body: bytes) -> None:
    assert unsupported_version_response(RequestHeader(3, 12, 1, "c", 0), body) is None


def test_response_header_v0_for_classic_versions() -> None:
    request = metadata_request(4, ("a",))
    payload = answer(3, 4, request)
    assert payload is not None
    # Header v0 is only the correlation id; the body starts right after it.
    assert struct.unpack_from(">i", payload, 4)[0] == 0  # throttle time
    assert struct.unpack_from(">i", payload, 8)[0] == 0  # empty brokers array


def test_error_codes_are_found_at_every_level() -> None:
    # Guard for error_codes(): it must see nested codes, or the sweep proves nothing.
    message = decode_answer(0, 9, answer(0, 9, produce_request(9)))
    assert len(error_codes(message)) == 3
    assert all(isinstance(c, int) for _, c in error_codes(message))


# --- the pairing rule on synthetic schemas -------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Result:
    group_id: str = dataclasses.field(metadata={"kafka_type": "string"})
    error_code: ErrorCode = dataclasses.field(metadata={"kafka_type": "error_code"})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Response:
    results: tuple[_Result, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Request:
    states_filter: tuple[str, ...] = dataclasses.field(metadata={"kafka_type": "string"})
    group_names: tuple[str, ...] = dataclasses.field(metadata={"kafka_type": "string"})


def test_plain_lists_feed_only_identifiers_their_name_mentions() -> None:
    # Kafka has no such pair today (kio's schemas pass either way); the rule keeps a
    # filter list from ever being echoed as if it named the items asked about.
    from gateway.interceptors.unsupported import _build

    response = _build(_Response, _Request(states_filter=("Stable",), group_names=("g1", "g2")))
    assert [(r.group_id, r.error_code) for r in response.results] == [
        ("g1", UNSUPPORTED),
        ("g2", UNSUPPORTED),
    ]
    response = _build(_Response, _Request(states_filter=("Stable",), group_names=()))
    assert response.results == ()
