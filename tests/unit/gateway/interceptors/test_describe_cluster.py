"""KIP-885 tags per broker entry of DescribeCluster responses, for every version."""

from __future__ import annotations

import datetime
import importlib

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from gateway.interceptors.api_versions import DEFAULT_SOFTWARE_TAGS, SoftwareTags
from gateway.interceptors.describe_cluster import (
    add_software_per_broker,
    read_software_per_broker,
    strip_software_per_broker,
)
from gateway.protocol._codec import decode_response, encode_response
from gateway.protocol._tagged import strip_unknown_tags
from gateway.versions import BrokerSoftware


def response(version: int):
    schema = importlib.import_module(f"kio.schema.describe_cluster.v{version}.response")
    broker_fields = set(schema.DescribeClusterBroker.__dataclass_fields__)
    brokers = []
    for node, rack in ((1, "r1"), (2, None), (3, "r3")):
        extra = {"is_fenced": node == 3} if "is_fenced" in broker_fields else {}
        brokers.append(
            schema.DescribeClusterBroker(
                broker_id=i32(node),
                host=f"gw-{node}.example",
                port=i32(9092 + node),
                rack=rack,
                **extra,
            )
        )
    fields = set(schema.DescribeClusterResponse.__dataclass_fields__)
    extra = {"endpoint_type": i8(1)} if "endpoint_type" in fields else {}
    return schema.DescribeClusterResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message="m",
        cluster_id="cluster",
        controller_id=i32(1),
        brokers=tuple(brokers),
        cluster_authorized_operations=i32(-(2**31)),
        **extra,
    )


def lookup(node_id: int) -> BrokerSoftware | None:
    return {1: BrokerSoftware("Apache Kafka", "3.7"), 3: BrokerSoftware("Tansu", "0.6")}.get(
        node_id
    )


@pytest.mark.parametrize("version", [0, 1, 2])
def test_tags_land_on_the_brokers_the_gateway_knows_and_nothing_else_changes(version):
    original = response(version)
    body = add_software_per_broker(
        version, encode_response(original), lookup, DEFAULT_SOFTWARE_TAGS
    )
    assert read_software_per_broker(version, body) == {
        1: ("Apache Kafka", "3.7"),
        3: ("Tansu", "0.6"),
    }
    # The rest of the message is intact: kio still reads it (tags aside) as the original.
    assert decode_response(60, version, _strip_nested(version, body)) == original


def test_custom_tag_numbers_are_honoured():
    tags = SoftwareTags(20000, 20001)
    body = add_software_per_broker(2, encode_response(response(2)), lookup, tags)
    assert read_software_per_broker(2, body) == {}
    assert read_software_per_broker(2, body, tags)[1] == ("Apache Kafka", "3.7")


def test_no_known_software_leaves_the_body_byte_identical():
    body = encode_response(response(1))
    assert add_software_per_broker(1, body, lambda _node: None, DEFAULT_SOFTWARE_TAGS) == body


def _strip_nested(version: int, body: bytes) -> bytes:
    """kio refuses unknown tags, nested ones included: take them out to compare."""
    return strip_software_per_broker(version, strip_unknown_tags(60, version, body))
