"""Broker address rewriting: every endpoint in every response that carries one."""

from __future__ import annotations

import dataclasses
import typing
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map

from gateway.interceptors.addresses import rewrite_response
from gateway.interceptors.dispatch import REWRITTEN_FROM
from gateway.protocol._tagged import read_top_level_tags, strip_unknown_tags
from tests.unit._kafka import RECORDS, build, decode, encode, nested, schema_module, top_level


class FakeBook:
    """Sends node N to gw-N.example:19000+N and remembers what it was asked."""

    generation = 0  # its answers never change

    def __init__(self) -> None:
        self.calls: list[tuple[int, str, int]] = []

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        self.calls.append((node_id, host, port))
        return f"gw-{node_id}.example", 19000 + node_id


class IdentityBook:
    """Advertises every broker as itself: nothing to change."""

    generation = 0  # its answers never change

    def __init__(self) -> None:
        self.calls = 0

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        self.calls += 1
        return host, port


def versions(api: str) -> list[int]:
    return sorted(schema_name_map[api])


def response_cls(api: str, version: int) -> type:
    return top_level(schema_module(api, version, "response"))


def rewrite(entity: Any, book: Any) -> tuple[bytes, bytes, Any]:
    """(original body, rewritten body, rewritten body decoded by kio)."""
    body = encode(entity)
    out = rewrite_response(entity.__api_key__, entity.__version__, body, book)
    assert isinstance(out, bytes)
    return body, out, decode(type(entity), out)


def replaced(entity: Any, **changes: Any) -> Any:
    return dataclasses.replace(entity, **changes)


# -- Metadata --------------------------------------------------------------------------

BROKERS = [
    {"node_id": 0, "host": "broker-0.internal", "port": 9092},
    {"node_id": 1, "host": "broker-1.internal", "port": 9093},
    {"node_id": 7, "host": "10.0.0.7", "port": 29092},
]


def metadata(version: int) -> Any:
    cls = response_cls("metadata", version)
    broker_cls = nested(cls, "brokers")
    racked = "rack" in broker_cls.__dataclass_fields__
    brokers = [dict(b, rack=f"rack-{b['node_id']}") if racked else b for b in BROKERS]
    topic_cls = nested(cls, "topics")
    topic = {
        "name": "orders",
        "partitions": [
            {"partition_index": 0, "leader_id": 1, "replica_nodes": [1, 7], "isr_nodes": [1]},
            {"partition_index": 1, "leader_id": 7, "replica_nodes": [7, 0], "isr_nodes": [7, 0]},
        ],
    }
    if "topic_id" in topic_cls.__dataclass_fields__:
        topic["topic_id"] = uuid.UUID(int=42)
    fields: dict[str, Any] = {"brokers": brokers, "topics": [topic]}
    if "cluster_id" in cls.__dataclass_fields__:
        fields["cluster_id"] = "cluster-xyz"
    if "controller_id" in cls.__dataclass_fields__:
        fields["controller_id"] = 7
    return build(cls, **fields)


@pytest.mark.parametrize("version", versions("metadata"))
def test_metadata_brokers_are_advertised_through_the_gateway(version: int) -> None:
    original = metadata(version)
    book = FakeBook()
    _, _, decoded = rewrite(original, book)
    expected_brokers = tuple(
        replaced(b, host=f"gw-{b.node_id}.example", port=19000 + b.node_id)
        for b in original.brokers
    )
    # Everything else (topics, partitions, replicas, cluster id, racks) is untouched.
    assert decoded == replaced(original, brokers=expected_brokers)
    assert book.calls == [(b["node_id"], b["host"], b["port"]) for b in BROKERS]


def test_metadata_versions_cover_classic_and_flexible() -> None:
    assert {0, 1, 9, 12} <= set(versions("metadata"))


def test_metadata_v1_keeps_racks_and_v12_keeps_topic_ids() -> None:
    _, _, v1 = rewrite(metadata(1), FakeBook())
    assert [b.rack for b in v1.brokers] == ["rack-0", "rack-1", "rack-7"]
    _, _, v12 = rewrite(metadata(12), FakeBook())
    assert v12.topics[0].topic_id == uuid.UUID(int=42)
    assert v12.cluster_id == "cluster-xyz" and v12.controller_id == 7


def test_metadata_without_brokers_comes_back_byte_identical() -> None:
    original = replaced(metadata(12), brokers=())
    body, out, _ = rewrite(original, FakeBook())
    assert out == body


# -- FindCoordinator -------------------------------------------------------------------

SINGLE_COORDINATOR = [v for v in versions("find_coordinator") if v <= 3]
BATCHED_COORDINATORS = [v for v in versions("find_coordinator") if v >= 4]


def test_find_coordinator_has_single_and_batched_versions() -> None:
    assert SINGLE_COORDINATOR == [0, 1, 2, 3]
    assert BATCHED_COORDINATORS and BATCHED_COORDINATORS[0] == 4


@pytest.mark.parametrize("version", SINGLE_COORDINATOR)
def test_find_coordinator_single_coordinator_is_advertised(version: int) -> None:
    original = build(response_cls("find_coordinator", version), node_id=3, host="b3", port=9094)
    book = FakeBook()
    _, _, decoded = rewrite(original, book)
    assert decoded == replaced(original, host="gw-3.example", port=19003)
    assert book.calls == [(3, "b3", 9094)]


@pytest.mark.parametrize("version", SINGLE_COORDINATOR)
def test_find_coordinator_node_zero_is_advertised(version: int) -> None:
    original = build(response_cls("find_coordinator", version), node_id=0, host="b0", port=9092)
    _, _, decoded = rewrite(original, FakeBook())
    assert (decoded.host, decoded.port) == ("gw-0.example", 19000)


@pytest.mark.parametrize("version", SINGLE_COORDINATOR)
def test_find_coordinator_error_without_a_node_is_left_alone(version: int) -> None:
    original = build(
        response_cls("find_coordinator", version),
        error_code=ErrorCode.coordinator_not_available,
        node_id=-1,
        host="",
        port=-1,
    )
    book = FakeBook()
    body, out, _ = rewrite(original, book)
    assert out == body
    assert book.calls == []


@pytest.mark.parametrize("version", BATCHED_COORDINATORS)
def test_find_coordinator_batched_coordinators_are_advertised_except_failed_ones(
    version: int,
) -> None:
    cls = response_cls("find_coordinator", version)
    original = build(
        cls,
        coordinators=[
            {"key": "group-a", "node_id": 1, "host": "b1", "port": 9093},
            {
                "key": "group-b",
                "node_id": -1,
                "host": "",
                "port": -1,
                "error_code": ErrorCode.coordinator_not_available,
                "error_message": "not yet",
            },
            {"key": "txn-c", "node_id": 2, "host": "b2", "port": 9094},
        ],
    )
    book = FakeBook()
    _, _, decoded = rewrite(original, book)
    a, b, c = original.coordinators
    assert decoded == replaced(
        original,
        coordinators=(
            replaced(a, host="gw-1.example", port=19001),
            b,
            replaced(c, host="gw-2.example", port=19002),
        ),
    )
    assert book.calls == [(1, "b1", 9093), (2, "b2", 9094)]


# -- DescribeCluster -------------------------------------------------------------------


@pytest.mark.parametrize("version", versions("describe_cluster"))
def test_describe_cluster_brokers_are_advertised(version: int) -> None:
    cls = response_cls("describe_cluster", version)
    original = build(
        cls,
        cluster_id="cluster-xyz",
        controller_id=1,
        brokers=[
            {"broker_id": 1, "host": "b1", "port": 9093, "rack": "r1"},
            {"broker_id": 2, "host": "b2", "port": 9094},
        ],
    )
    book = FakeBook()
    _, _, decoded = rewrite(original, book)
    b1, b2 = original.brokers
    assert decoded == replaced(
        original,
        brokers=(
            replaced(b1, host="gw-1.example", port=19001),
            replaced(b2, host="gw-2.example", port=19002),
        ),
    )
    assert book.calls == [(1, "b1", 9093), (2, "b2", 9094)]


def test_describe_cluster_has_v0_and_v1() -> None:
    assert {0, 1} <= set(versions("describe_cluster"))


# -- KIP-951 NodeEndpoints (Produce, Fetch, ShareFetch, ShareAcknowledge) ---------------

ENDPOINTS = [
    {"node_id": 1, "host": "b1", "port": 9093, "rack": "r1"},
    {"node_id": 2, "host": "b2", "port": 9094},
]


def produce_response(version: int, endpoints: list[dict[str, Any]]) -> Any:
    cls = response_cls("produce", version)
    topic = {
        "partition_responses": [
            {
                "index": 0,
                "base_offset": 41,
                "current_leader": {"leader_id": 2, "leader_epoch": 5},
                "error_code": ErrorCode.not_leader_or_follower,
            }
        ],
    }
    if "topic_id" in nested(cls, "responses").__dataclass_fields__:
        topic["topic_id"] = uuid.UUID(int=9)
    else:
        topic["name"] = "orders"
    return build(cls, responses=[topic], node_endpoints=endpoints)


def fetch_response(api: str, version: int, endpoints: list[dict[str, Any]]) -> Any:
    cls = response_cls(api, version)
    partition: dict[str, Any] = {
        "partition_index": 0,
        "records": RECORDS,
        "current_leader": {"leader_id": 1, "leader_epoch": 3},
    }
    if api == "fetch":
        partition["high_watermark"] = 42
    return build(
        cls,
        responses=[{"topic_id": uuid.UUID(int=9), "partitions": [partition]}],
        node_endpoints=endpoints,
    )


def share_acknowledge_response(version: int, endpoints: list[dict[str, Any]]) -> Any:
    cls = response_cls("share_acknowledge", version)
    return build(
        cls,
        responses=[
            {
                "topic_id": uuid.UUID(int=9),
                "partitions": [{"partition_index": 0, "current_leader": {"leader_id": 2}}],
            }
        ],
        node_endpoints=endpoints,
    )


NODE_ENDPOINT_CASES = [
    *(
        (f"produce-v{v}", lambda e, v=v: produce_response(v, e))
        for v in versions("produce")
        if v >= 10
    ),
    *(
        (f"fetch-v{v}", lambda e, v=v: fetch_response("fetch", v, e))
        for v in versions("fetch")
        if v >= 16
    ),
    *(
        (f"share_fetch-v{v}", lambda e, v=v: fetch_response("share_fetch", v, e))
        for v in versions("share_fetch")
    ),
    *(
        (f"share_acknowledge-v{v}", lambda e, v=v: share_acknowledge_response(v, e))
        for v in versions("share_acknowledge")
    ),
]


def test_node_endpoint_cases_cover_every_api_that_carries_them() -> None:
    apis = {name.split("-v")[0] for name, _ in NODE_ENDPOINT_CASES}
    assert apis == {"produce", "fetch", "share_fetch", "share_acknowledge"}
    assert "produce-v10" in dict(NODE_ENDPOINT_CASES) and "fetch-v16" in dict(NODE_ENDPOINT_CASES)


@pytest.mark.parametrize(
    "make", [c[1] for c in NODE_ENDPOINT_CASES], ids=[c[0] for c in NODE_ENDPOINT_CASES]
)
def test_node_endpoints_are_advertised_and_the_rest_survives(make: Any) -> None:
    original = make(ENDPOINTS)
    book = FakeBook()
    _, _, decoded = rewrite(original, book)
    e1, e2 = original.node_endpoints
    assert decoded == replaced(
        original,
        node_endpoints=(
            replaced(e1, host="gw-1.example", port=19001),
            replaced(e2, host="gw-2.example", port=19002),
        ),
    )
    assert book.calls == [(1, "b1", 9093), (2, "b2", 9094)]
    # The record bytes and leader hints the client acts on are exactly as the broker sent.
    assert decoded.responses == original.responses


@pytest.mark.parametrize(
    "make", [c[1] for c in NODE_ENDPOINT_CASES], ids=[c[0] for c in NODE_ENDPOINT_CASES]
)
def test_response_without_node_endpoints_comes_back_byte_identical(make: Any) -> None:
    original = make([])
    body, out, _ = rewrite(original, FakeBook())
    assert out == body


def test_fetch_records_survive_a_rewrite_byte_for_byte() -> None:
    original = fetch_response("fetch", 16, ENDPOINTS)
    body, out, _ = rewrite(original, FakeBook())
    assert RECORDS in body and RECORDS in out
    assert out != body


# -- nothing to change -----------------------------------------------------------------

UNCHANGED_CASES = [
    ("metadata-v0", lambda: metadata(0)),
    ("metadata-v12", lambda: metadata(12)),
    (
        "find_coordinator-v3",
        lambda: build(response_cls("find_coordinator", 3), node_id=3, host="b3", port=9094),
    ),
    (
        "find_coordinator-v4",
        lambda: build(
            response_cls("find_coordinator", 4),
            coordinators=[{"key": "g", "node_id": 1, "host": "b1", "port": 9093}],
        ),
    ),
    ("produce-v10", lambda: produce_response(10, ENDPOINTS)),
    ("fetch-v16", lambda: fetch_response("fetch", 16, ENDPOINTS)),
]


@pytest.mark.parametrize(
    "make", [c[1] for c in UNCHANGED_CASES], ids=[c[0] for c in UNCHANGED_CASES]
)
def test_response_whose_addresses_already_match_comes_back_byte_identical(make: Any) -> None:
    original = make()
    book = IdentityBook()
    body, out, _ = rewrite(original, book)
    assert out == body
    assert book.calls > 0  # it did look


def test_response_with_an_unknown_tagged_field_is_rewritten_and_keeps_the_tag() -> None:
    # Kafka adds tagged fields to existing versions; a newer broker may send one. kio
    # refuses unknown tags, so the rewriter splits them off and splices them back.
    original = metadata(12)
    body = encode(original)
    assert body.endswith(b"\x00")  # empty top-level tagged-field section
    with_unknown_tag = body[:-1] + b"\x01\x63\x03abc"  # tag 99, 3 bytes
    out = rewrite_response(3, 12, with_unknown_tag, FakeBook())
    assert read_top_level_tags(3, 12, out) == {99: b"abc"}
    assert [b.host for b in decode(type(original), strip_unknown_tags(3, 12, out)).brokers] == [
        "gw-0.example",
        "gw-1.example",
        "gw-7.example",
    ]


def test_only_the_array_that_holds_the_endpoints_is_rewritten() -> None:
    # Metadata: the brokers are re-encoded, the topics after them are kept byte for byte
    # (never decoded), even bytes a decoder would not expect.
    original = metadata(12)
    body = encode(original)
    out = rewrite_response(3, 12, body + b"junk", FakeBook())
    assert out.endswith(b"junk")
    decoded = decode(type(original), out[:-4])
    assert [b.host for b in decoded.brokers] == ["gw-0.example", "gw-1.example", "gw-7.example"]
    assert decoded.topics == original.topics


def test_a_decoded_body_with_bytes_after_its_end_is_refused_not_cut_short() -> None:
    # FindCoordinator v3 has its endpoint at the top level, so the whole body is decoded;
    # re-encoding it would silently drop the extra bytes, so the gateway refuses it and
    # its caller forwards the response untouched (counting a rewrite error).
    body = encode(build(response_cls("find_coordinator", 3), node_id=3, host="b3", port=9094))
    for extra in (b"\x00", b"junk"):
        with pytest.raises(ValueError, match="after its end"):
            rewrite_response(10, 3, body + extra, FakeBook())


@pytest.mark.parametrize("wrap", [memoryview, lambda b: memoryview(bytearray(b))])
@pytest.mark.parametrize(
    ("key", "version", "make"),
    [
        (3, 9, lambda: metadata(9)),
        (10, 3, lambda: build(response_cls("find_coordinator", 3), node_id=3, host="b", port=1)),
        (1, 16, lambda: fetch_response("fetch", 16, ENDPOINTS)),
    ],
    ids=["array", "whole", "tail"],
)
def test_rewrite_accepts_a_memoryview_body(key: int, version: int, make: Any, wrap: Any) -> None:
    # The proxy hands over a view of the frame it gathered into a bytearray (writable),
    # which kio's native readers refuse unless given a read-only view.
    original = make()
    out = rewrite_response(key, version, wrap(encode(original)), FakeBook())
    assert b"gw-" in bytes(out)


# -- which responses are rewritten -----------------------------------------------------


@pytest.mark.parametrize(
    ("key", "version", "expected"),
    [
        (3, 0, True),
        (3, 13, True),
        (10, 0, True),
        (10, 6, True),
        (60, 0, True),
        (0, 9, False),
        (0, 10, True),
        (1, 15, False),
        (1, 16, True),
        (78, 1, True),
        (79, 1, True),
        (18, 3, False),
        (2, 9, False),
        (4242, 0, False),
    ],
)
def test_responses_rewritten_by_key_and_version(key: int, version: int, expected: bool) -> None:
    assert rewritten(key, version) is expected


def rewritten(key: int, version: int) -> bool:
    return version >= REWRITTEN_FROM.get(key, 1 << 15)


def _endpoint_holders() -> set[tuple[int, int]]:
    """(key, version) of every kio response schema with a broker endpoint record in it."""
    found = set()
    for key, name in api_key_map.items():
        for version in schema_name_map[name]:
            try:
                cls = response_cls(name, version)
            except (ImportError, LookupError):
                continue
            if _has_endpoint(cls, set()):
                found.add((key, version))
    return found


def _has_endpoint(cls: type, seen: set[type]) -> bool:
    if cls in seen:
        return False
    seen.add(cls)
    names = set(cls.__dataclass_fields__)
    if {"host", "port"} <= names and names & {"node_id", "broker_id"}:
        return True
    hints = typing.get_type_hints(cls)
    for hint in hints.values():
        for inner in (hint, *typing.get_args(hint)):
            if dataclasses.is_dataclass(inner) and _has_endpoint(inner, seen):
                return True
    return False


# Raft-internal responses name controller endpoints; clients never see them.
CONTROLLER_ONLY = {52, 53, 54, 59}


def test_every_client_response_with_a_broker_endpoint_is_rewritten() -> None:
    holders = {(k, v) for k, v in _endpoint_holders() if k not in CONTROLLER_ONLY}
    assert holders, "the schema walk found nothing"
    assert {(k, v) for k, v in holders if not rewritten(k, v)} == set()
