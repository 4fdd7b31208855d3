"""The gateway's ApiVersions answer: versions, KIP-511 validation, features, KIP-885 tags."""

from __future__ import annotations

import datetime
import importlib
import io
import struct
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32, i32Timedelta

from gateway.interceptors.api_versions import (
    DEFAULT_SOFTWARE_TAGS,
    SoftwareTags,
    add_broker_software,
    answer_api_versions,
    client_software_valid,
    read_broker_software,
)
from gateway.protocol import RequestHeader, parse_request_header
from gateway.protocol._tagged import read_top_level_tags, strip_unknown_tags
from gateway.versions import BrokerSoftware

RANGES = {0: (3, 11), 1: (4, 17), 3: (0, 12), 18: (0, 4), 60: (0, 1)}
KAFKA_37 = BrokerSoftware("Apache Kafka", "3.7")


def encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def request(
    version: int, body: bytes = b"", correlation_id: int = 7
) -> tuple[RequestHeader, bytes]:
    """Parse a hand-built ApiVersions request frame payload like the core does."""
    head = struct.pack(">hhi", 18, version, correlation_id) + struct.pack(">h", 3) + b"cli"
    if version >= 3:
        head += b"\x00"  # header v2: empty tagged section
    payload = head + body
    header = parse_request_header(payload)
    return header, payload[header.body_offset :]


def software_body(name: str, version: str) -> bytes:
    return encode(ApiVersionsRequest(client_software_name=name, client_software_version=version))


def decode_payload(payload: bytes, version: int, correlation_id: int = 7) -> Any:
    # ApiVersions responses always use header v0: just the correlation id.
    assert struct.unpack_from(">i", payload)[0] == correlation_id
    body = payload[4:]
    if version >= 3:
        body = strip_unknown_tags(18, version, body)
    entity, size = entity_reader(load_response_schema(18, version))(body, 0)
    assert size == len(body)
    return entity


def ranges_of(message: Any) -> dict[int, tuple[int, int]]:
    return {k.api_key: (k.min_version, k.max_version) for k in message.api_keys}


# --- versions --------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_classic_versions_answer_with_the_ranges(version: int) -> None:
    header, body = request(version)
    answer = answer_api_versions(header, body, RANGES, broker_software=KAFKA_37)
    assert answer.error_code == 0
    assert answer.response_version == version
    assert answer.client_software is None
    message = decode_payload(answer.payload, version)
    assert message.error_code == ErrorCode.none
    assert ranges_of(message) == RANGES
    if version >= 1:
        assert message.throttle_time == datetime.timedelta(0)
    # No tagged fields before v3: the body is exactly what kio would write.
    assert encode(message) == answer.payload[4:]


@pytest.mark.parametrize("version", [3, 4])
def test_flexible_versions_answer_and_learn_client_software(version: int) -> None:
    header, body = request(version, software_body("apache-kafka-java", "3.7.0"))
    answer = answer_api_versions(header, body, RANGES, broker_software=KAFKA_37)
    assert answer.error_code == 0
    assert answer.client_software == ("apache-kafka-java", "3.7.0")
    message = decode_payload(answer.payload, version)
    assert ranges_of(message) == RANGES
    assert read_broker_software(answer.payload, version=version) == ("Apache Kafka", "3.7")


@pytest.mark.parametrize("version", [5, 99, 32767])
def test_too_new_version_gets_v0_error_35_with_key_18_only(version: int) -> None:
    # The body of a version the gateway does not know must not be parsed at all.
    header, body = request(version, b"\xff\xfe garbage")
    answer = answer_api_versions(header, body, RANGES, broker_software=KAFKA_37)
    assert answer.error_code == 35
    assert answer.response_version == 0
    assert answer.client_software is None
    expected = (
        struct.pack(">i", 7)  # header v0
        + struct.pack(">h", 35)
        + struct.pack(">i", 1)  # classic array of one
        + struct.pack(">hhh", 18, 0, 4)
    )
    assert answer.payload == expected


def test_version_above_advertised_key_18_range_is_too_new() -> None:
    # If the gateway advertises ApiVersions 0-3 only, a v4 request is retried at 3.
    header, body = request(4, software_body("librdkafka", "2.5.0"))
    answer = answer_api_versions(header, body, {**RANGES, 18: (0, 3)})
    assert answer.error_code == 35
    message = decode_payload(answer.payload, 0)
    assert ranges_of(message) == {18: (0, 3)}


# --- KIP-511 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("apache-kafka-java", "3.7.0"),
        ("librdkafka", "2.5.0"),
        ("confluent-kafka-python", "2.5.0-rdkafka-2.5.0"),
        ("a", "1"),
        ("franz-go", "v1.17.1"),
    ],
)
def test_valid_software(name: str, version: str) -> None:
    assert client_software_valid(name, version)
    header, body = request(3, software_body(name, version))
    answer = answer_api_versions(header, body, RANGES)
    assert (answer.error_code, answer.client_software) == (0, (name, version))


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("bad name!", "1.0"),  # Tansu accepts this; Kafka does not
        ("", "1.0"),
        ("ok", ""),
        ("-leading", "1.0"),
        ("trailing-", "1.0"),
        ("ok", "1.0."),
        ("ok", "1.0\n"),
        ("dé", "1.0"),
        ("under_score", "1.0"),
    ],
)
def test_invalid_software_gets_42_and_empty_api_keys(name: str, version: str) -> None:
    assert not client_software_valid(name, version)
    header, body = request(3, software_body(name, version))
    answer = answer_api_versions(header, body, RANGES, broker_software=KAFKA_37)
    assert answer.error_code == 42
    assert answer.client_software is None
    assert answer.response_version == 3
    message = decode_payload(answer.payload, 3)
    assert message.error_code == ErrorCode.invalid_request
    assert message.api_keys == ()
    # The KIP-885 fields are on every v3+ answer, errors included.
    assert read_broker_software(answer.payload) == ("Apache Kafka", "3.7")


@pytest.mark.parametrize("body", [b"", b"\x05ab", b"\x02a"])
def test_undecodable_v3_body_gets_42(body: bytes) -> None:
    header, body = request(3, body)
    answer = answer_api_versions(header, body, RANGES)
    assert answer.error_code == 42
    assert decode_payload(answer.payload, 3).api_keys == ()


# --- features ----------------------------------------------------------------------------

SUPPORTED = {"group.version": (0, 1), "transaction.version": (1, 2), "kraft.version": (0, 1)}
FINALIZED: dict[str, int | tuple[int, int]] = {
    "group.version": 1,
    "transaction.version": (1, 2),
    "kraft.version": 0,
}


def features_answer(version: int) -> Any:
    header, body = request(version, software_body("librdkafka", "2.5.0"))
    answer = answer_api_versions(
        header,
        body,
        RANGES,
        supported_features=SUPPORTED,
        finalized_features=FINALIZED,
        finalized_epoch=12,
    )
    return decode_payload(answer.payload, version)


def test_v3_leaves_out_supported_features_with_min_0() -> None:
    message = features_answer(3)
    assert [(f.name, f.min_version, f.max_version) for f in message.supported_features] == [
        ("transaction.version", 1, 2)
    ]


def test_v4_lists_every_supported_feature() -> None:
    message = features_answer(4)
    assert [(f.name, f.min_version, f.max_version) for f in message.supported_features] == [
        ("group.version", 0, 1),
        ("kraft.version", 0, 1),
        ("transaction.version", 1, 2),
    ]


@pytest.mark.parametrize("version", [3, 4])
def test_finalized_features_skip_level_0_and_carry_the_epoch(version: int) -> None:
    message = features_answer(version)
    assert message.finalized_features_epoch == 12
    assert [
        (f.name, f.min_version_level, f.max_version_level) for f in message.finalized_features
    ] == [("group.version", 1, 1), ("transaction.version", 1, 2)]


def test_no_features_means_epoch_minus_1_and_no_feature_tags() -> None:
    header, body = request(3, software_body("librdkafka", "2.5.0"))
    answer = answer_api_versions(header, body, RANGES)
    tags = read_top_level_tags(18, 3, answer.payload[4:])
    assert sorted(tags) == [10000, 10001]  # only KIP-885: features are at their defaults


# --- KIP-885 -----------------------------------------------------------------------------


def test_default_tags_avoid_kafkas_tags() -> None:
    assert DEFAULT_SOFTWARE_TAGS == (10000, 10001)
    assert not {0, 1, 2, 3} & set(DEFAULT_SOFTWARE_TAGS)


def test_broker_software_defaults_to_unknown() -> None:
    header, body = request(3, software_body("librdkafka", "2.5.0"))
    answer = answer_api_versions(header, body, RANGES)
    assert read_broker_software(answer.payload) == ("unknown", "unknown")


def test_broker_software_none_adds_no_tags() -> None:
    header, body = request(3, software_body("librdkafka", "2.5.0"))
    answer = answer_api_versions(header, body, RANGES, broker_software=None)
    assert answer.payload.endswith(b"\x00")
    assert read_broker_software(answer.payload) is None


def test_tags_are_compact_strings_at_the_configured_numbers() -> None:
    tags = SoftwareTags(name=20000, version=20001)
    header, body = request(4, software_body("librdkafka", "2.5.0"))
    answer = answer_api_versions(
        header, body, RANGES, broker_software=("Tansu", "0.6.0"), software_tags=tags
    )
    raw = read_top_level_tags(18, 4, answer.payload[4:])
    assert raw == {20000: b"\x06Tansu", 20001: b"\x060.6.0"}
    assert read_broker_software(answer.payload, version=4) is None  # default tags absent
    assert read_broker_software(answer.payload, version=4, tags=tags) == ("Tansu", "0.6.0")


def test_read_broker_software_takes_body_or_payload() -> None:
    header, body = request(3, software_body("librdkafka", "2.5.0"))
    answer = answer_api_versions(header, body, RANGES, broker_software=KAFKA_37)
    assert read_broker_software(answer.payload) == ("Apache Kafka", "3.7")
    assert read_broker_software(answer.payload[4:]) == ("Apache Kafka", "3.7")
    assert read_broker_software(bytearray(answer.payload)) == ("Apache Kafka", "3.7")


def test_read_broker_software_on_non_gateway_answers() -> None:
    header, body = request(0)
    v0 = answer_api_versions(header, body, RANGES, broker_software=KAFKA_37)
    assert read_broker_software(v0.payload, version=0) is None  # v0 has no tags
    assert read_broker_software(b"") is None
    assert read_broker_software(b"\x00\x00\x00\x07garbage") is None


def test_unicode_broker_software_round_trips() -> None:
    header, body = request(3, software_body("librdkafka", "2.5.0"))
    software = ("Gateway → Apache Kafka", ">=4.2")
    answer = answer_api_versions(header, body, RANGES, broker_software=software)
    assert read_broker_software(answer.payload) == software


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster_top_level_tags(version: int) -> None:
    schema = load_response_schema(60, version)
    module = importlib.import_module(schema.__module__)
    broker: dict[str, Any] = {"broker_id": i32(1), "host": "gw", "port": i32(9092), "rack": None}
    if version >= 2:
        broker["is_fenced"] = False
    kwargs: dict[str, Any] = {
        "throttle_time": i32Timedelta.parse(datetime.timedelta(0)),
        "error_code": ErrorCode.none,
        "cluster_id": "c1",
        "controller_id": i32(1),
        "brokers": (module.DescribeClusterBroker(**broker),),
        "cluster_authorized_operations": i32(-2147483648),
    }
    if version >= 1:
        kwargs["endpoint_type"] = i8(1)
    body = encode(schema(**kwargs))
    spliced = add_broker_software(60, version, body, KAFKA_37)
    payload = struct.pack(">i", 9) + b"\x00" + spliced  # response header v1
    assert read_broker_software(payload, api_key=60, version=version) == ("Apache Kafka", "3.7")
    assert read_broker_software(spliced, api_key=60, version=version) == ("Apache Kafka", "3.7")
    decoded, _ = entity_reader(schema)(strip_unknown_tags(60, version, spliced), 0)
    assert decoded == schema(**kwargs)


def test_v5_reads_the_client_software_before_kip_1242s_fields_and_answers_v5() -> None:
    # ApiVersions v5 (Kafka 4.4, KIP-1242) adds ClusterId (compact nullable string) and
    # NodeId (int32) after the client software; its response is v3's layout (Kafka's specs).
    extra = b"\x05abcd" + struct.pack(">i", 1)  # ClusterId "abcd", NodeId 1
    header, body = request(5, software_body("apache-kafka-java", "4.4.0")[:-1] + extra + b"\x00")
    answer = answer_api_versions(header, body, {**RANGES, 18: (0, 5)}, broker_software=KAFKA_37)
    assert answer.error_code == 0
    assert answer.response_version == 5
    assert answer.client_software == ("apache-kafka-java", "4.4.0")
    message = decode_payload(answer.payload, 3)  # v5's bytes read as v3's layout
    assert ranges_of(message)[18] == (0, 5)
    assert read_broker_software(answer.payload, version=5) == tuple(KAFKA_37)
