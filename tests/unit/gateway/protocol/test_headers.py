"""Request/response headers, header versions per API, Produce acks, wire primitives."""

from __future__ import annotations

import io
import struct

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as KioRequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioRequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as KioResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as KioResponseHeaderV1
from kio.serial import entity_writer

from gateway.protocol import (
    API_VERSIONS,
    Incomplete,
    Malformed,
    RequestHeader,
    api_name,
    api_spec,
    frame,
    known_api_keys,
    parse_request_header,
    produce_acks,
    read_tagged_fields,
    response_body_offset,
    response_header,
    write_tagged_fields,
)
from gateway.protocol._walk import skip_tagged_fields
from gateway.protocol._wire import read_uvarint, write_uvarint
from tests.unit._kafka import classic_string, encode, produce, tagged_section, uvarint


def kio_header(cls: type, **fields: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(cls)(buf, cls(**fields))
    return buf.getvalue()


# -- request headers -------------------------------------------------------------------


def test_controlled_shutdown_v0_uses_request_header_v0_without_client_id() -> None:
    payload = struct.pack(">hhi", 7, 0, 42) + struct.pack(">i", 1)  # body: broker id 1
    assert parse_request_header(payload) == RequestHeader(7, 0, 42, None, 8)


def test_controlled_shutdown_v1_uses_request_header_v1() -> None:
    payload = struct.pack(">hhi", 7, 1, 42) + classic_string("broker-1") + struct.pack(">iq", 1, 5)
    assert parse_request_header(payload) == RequestHeader(7, 1, 42, "broker-1", 18)


@pytest.mark.parametrize(
    "client_id", ["consumer-1", "", None, "prodücer-ß"], ids=["plain", "empty", "null", "utf8"]
)
def test_request_header_v1_reads_client_id_and_body_offset(client_id: str | None) -> None:
    header = struct.pack(">hhi", 3, 1, 7) + classic_string(client_id)
    parsed = parse_request_header(header + b"\x00\x00\x00\x00")  # Metadata v1: empty topics
    assert parsed == RequestHeader(3, 1, 7, client_id, len(header))


def test_request_header_v1_as_kio_writes_it() -> None:
    header = kio_header(
        KioRequestHeaderV1,
        request_api_key=3,
        request_api_version=8,
        correlation_id=123456,
        client_id="kio-client",
    )
    assert parse_request_header(header + b"\xff" * 5) == RequestHeader(
        3, 8, 123456, "kio-client", len(header)
    )


@pytest.mark.parametrize(
    "tagged",
    [{}, {0: b"abc"}, {0: b"", 5: b"x" * 200}, {300: b"\x01"}],
    ids=["absent", "one", "two-with-long-value", "big-tag-number"],
)
@pytest.mark.parametrize("client_id", ["rdkafka", None])
def test_request_header_v2_skips_tagged_fields(
    tagged: dict[int, bytes], client_id: str | None
) -> None:
    header = struct.pack(">hhi", 3, 12, 99) + classic_string(client_id) + tagged_section(tagged)
    # Body of a Metadata v12 request with its first bytes looking like more tags.
    parsed = parse_request_header(header + b"\x01\x01\x01\x00")
    assert parsed == RequestHeader(3, 12, 99, client_id, len(header))


def test_request_header_v2_client_id_stays_a_classic_string() -> None:
    # Flexible versions encode strings compactly, except the header's client id.
    header = kio_header(
        KioRequestHeaderV2,
        request_api_key=18,
        request_api_version=3,
        correlation_id=1,
        client_id="apache-kafka-java",
    )
    assert header[8:10] == struct.pack(">h", len("apache-kafka-java"))
    assert parse_request_header(header) == RequestHeader(18, 3, 1, "apache-kafka-java", len(header))


@pytest.mark.parametrize("version", [5, 99, 32767])
def test_api_versions_newer_than_known_still_has_request_header_v2(version: int) -> None:
    header = struct.pack(">hhi", 18, version, 5) + classic_string("c") + tagged_section({1: b"zz"})
    assert parse_request_header(header + b"\x02x\x02y\x00").body_offset == len(header)


def test_sasl_handshake_is_never_flexible_so_no_header_tags_are_read() -> None:
    for version in (0, 1, 2, 50):
        header = struct.pack(">hhi", 17, version, 5) + classic_string("c")
        # Body: the mechanism as a classic string; its first byte is not a tag count.
        assert parse_request_header(header + classic_string("PLAIN")).body_offset == len(header)


def test_unknown_api_key_is_read_as_header_v1() -> None:
    header = struct.pack(">hhi", 4242, 0, 5) + classic_string("c")
    assert parse_request_header(header + b"\x05\x00").body_offset == len(header)


def test_non_utf8_client_id_is_decoded_with_replacement_not_rejected() -> None:
    header = struct.pack(">hhi", 3, 1, 5) + struct.pack(">h", 2) + b"\xff\xfe"
    assert parse_request_header(header) == RequestHeader(3, 1, 5, "\ufffd\ufffd", 12)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"", id="empty"),
        pytest.param(struct.pack(">hhi", 3, 1, 5)[:7], id="seven-bytes"),
        pytest.param(struct.pack(">hhi", 3, 1, 5) + b"\x00", id="half-a-string-length"),
        pytest.param(struct.pack(">hhih", 3, 1, 5, 10) + b"abc", id="client-id-truncated"),
        pytest.param(struct.pack(">hhih", 3, 1, 5, -2), id="client-id-length-minus-2"),
        pytest.param(struct.pack(">hhih", 3, 12, 5, -1), id="v2-without-tag-section"),
        pytest.param(struct.pack(">hhih", 3, 12, 5, -1) + b"\x01\x00\x09abc", id="v2-tag-past-end"),
        pytest.param(struct.pack(">hhih", 3, 12, 5, -1) + b"\x02\x00\x00", id="v2-missing-tag"),
        pytest.param(struct.pack(">hhih", 3, 12, 5, -1) + b"\xff" * 6, id="v2-varint-too-long"),
    ],
)
def test_bad_request_header_is_malformed(payload: bytes) -> None:
    with pytest.raises(Malformed):
        parse_request_header(payload)


# -- response headers ------------------------------------------------------------------


@pytest.mark.parametrize("correlation_id", [0, 1, -1, 2**31 - 1, -(2**31)])
def test_response_header_encodes_as_kio_does(correlation_id: int) -> None:
    assert response_header(correlation_id, 0) == kio_header(
        KioResponseHeaderV0, correlation_id=correlation_id
    )
    assert response_header(correlation_id, 1) == kio_header(
        KioResponseHeaderV1, correlation_id=correlation_id
    )
    assert response_header(correlation_id, 1) == struct.pack(">i", correlation_id) + b"\x00"


@pytest.mark.parametrize(
    ("header_version", "header"),
    [
        (0, struct.pack(">i", 7)),
        (1, struct.pack(">i", 7) + tagged_section()),
        (1, struct.pack(">i", 7) + tagged_section({0: b"ab", 3: b""})),
        (1, struct.pack(">i", 7) + tagged_section({1: b"y" * 300})),
    ],
    ids=["v0", "v1-no-tags", "v1-two-tags", "v1-long-tag"],
)
def test_response_body_offset_is_after_the_header(header_version: int, header: bytes) -> None:
    # The body starts with bytes that would parse as a tag section if v0 were misread.
    assert response_body_offset(header + b"\x01\x00\x00", header_version) == len(header)


@pytest.mark.parametrize(
    ("payload", "header_version"),
    [
        (b"\x00\x00\x07", 0),
        (b"\x00\x00\x07", 1),
        (struct.pack(">i", 7), 1),
        (struct.pack(">i", 7) + b"\x01\x00\x05ab", 1),
    ],
    ids=["v0-short", "v1-short", "v1-no-tag-section", "v1-tag-past-end"],
)
def test_bad_response_header_is_malformed(payload: bytes, header_version: int) -> None:
    with pytest.raises(Malformed):
        response_body_offset(payload, header_version)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 5, 99])
def test_api_versions_responses_use_header_v0_for_every_version(version: int) -> None:
    spec = api_spec(API_VERSIONS)
    assert spec is not None
    assert spec.response_header_version(version) == 0
    # ...although its requests switch to header v2 from v3 on.
    assert spec.request_header_version(version) == (2 if version >= 3 else 1)


# -- flexibility per API ---------------------------------------------------------------

# First flexible version per key, from Kafka's message JSON files (see the protocol notes).
KAFKA_FIRST_FLEXIBLE = {
    0: 9,  # Produce
    1: 12,  # Fetch
    2: 6,  # ListOffsets
    3: 9,  # Metadata
    8: 8,  # OffsetCommit
    9: 6,  # OffsetFetch
    10: 3,  # FindCoordinator
    11: 6,  # JoinGroup
    12: 4,  # Heartbeat
    13: 4,  # LeaveGroup
    14: 4,  # SyncGroup
    15: 5,  # DescribeGroups
    16: 3,  # ListGroups
    18: 3,  # ApiVersions
    19: 5,  # CreateTopics
    20: 4,  # DeleteTopics
    22: 2,  # InitProducerId
    36: 2,  # SaslAuthenticate
}


@pytest.mark.parametrize(("key", "first"), sorted(KAFKA_FIRST_FLEXIBLE.items()))
def test_first_flexible_version_matches_kafka(key: int, first: int) -> None:
    spec = api_spec(key)
    assert spec is not None
    assert spec.first_flexible == first
    assert not spec.is_flexible(first - 1)
    assert spec.is_flexible(first)


def test_sasl_handshake_and_offset_delete_are_never_flexible() -> None:
    for key in (17, 47):
        spec = api_spec(key)
        assert spec is not None and spec.first_flexible is None
        assert not any(spec.is_flexible(v) for v in range(0, 40))


# Keys >= 50 are flexible from their first version, except where kio says otherwise:
# BeginQuorumEpoch/EndQuorumEpoch (53/54) became flexible in v1; AlterPartition (56) and
# the share-group APIs (76-79) have no older version left in kio (v0/v1 were removed, or
# were early access), so their first known version is their first flexible one.
# The union over releases: AlterPartition v0-1 (3.x) and the share-group APIs' v0 (3.9's
# early access) count, though Kafka 4.4 dropped them.
LATE_FLEXIBLE = {53: (0, 1), 54: (0, 1)}


@pytest.mark.parametrize("key", [k for k in known_api_keys() if k >= 50])
def test_keys_from_50_are_flexible_from_their_first_version(key: int) -> None:
    spec = api_spec(key)
    assert spec is not None
    expected_min, expected_first = LATE_FLEXIBLE.get(key, (0, 0))
    assert (spec.min_version, spec.first_flexible) == (expected_min, expected_first)


def _kio_versions() -> list[tuple[int, int]]:
    return [
        (k, v) for k, name in sorted(api_key_map.items()) for v in sorted(schema_name_map[name])
    ]


@pytest.mark.parametrize(("key", "version"), _kio_versions())
def test_header_versions_agree_with_kio_for_every_known_version(key: int, version: int) -> None:
    spec = api_spec(key)
    assert spec is not None
    request_header = load_request_schema(key, version).__header_schema__.__version__
    response_header_v = load_response_schema(key, version).__header_schema__.__version__
    assert spec.request_header_version(version) == request_header
    assert spec.response_header_version(version) == response_header_v


FLEXIBLE_KEYS = [
    k for k in known_api_keys() if getattr(api_spec(k), "first_flexible", None) is not None
]


@pytest.mark.parametrize("key", FLEXIBLE_KEYS)
def test_versions_above_the_newest_schema_stay_flexible(key: int) -> None:
    spec = api_spec(key)
    assert spec is not None
    for version in (spec.max_version + 1, spec.max_version + 100):
        assert spec.is_flexible(version)
        assert spec.request_header_version(version) == 2
        assert spec.response_header_version(version) == (0 if key == API_VERSIONS else 1)


def test_spec_ranges_and_names() -> None:
    produce_spec = api_spec(0)
    assert produce_spec is not None
    # Every version any release accepted: 3.9's v0-2 (removed in 4.0) up to 4.4's v13.
    assert (produce_spec.name, produce_spec.min_version, produce_spec.max_version) == (
        "Produce",
        0,
        13,
    )
    assert api_name(60) == "DescribeCluster"
    assert api_name(18) == "ApiVersions"
    assert api_spec(4242) is None and api_name(4242) == "Unknown"
    keys = known_api_keys()
    assert keys == sorted(keys) and {0, 1, 3, 10, 18, 60} <= set(keys)


# -- Produce acks ----------------------------------------------------------------------


def _transactional_id_size(version: int, txn: str | None) -> int:
    if version >= 9:  # compact nullable string
        return 1 if txn is None else len(uvarint(len(txn) + 1)) + len(txn)
    return 2 + (0 if txn is None else len(txn))


@pytest.mark.parametrize("version", range(3, 14))
@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("txn", [None, "", "t" * 130], ids=["no-txn", "empty-txn", "long-txn"])
def test_produce_acks_is_read_after_transactional_id_and_only_that_far(
    version: int, acks: int, txn: str | None
) -> None:
    req = produce(version, 1, acks=acks, transactional_id=txn, client_id="p" * 10)
    payload = req.frame[4:]
    acks_end = req.header_len + _transactional_id_size(version, txn) + 2
    assert struct.unpack_from(">h", payload, acks_end - 2) == (acks,)  # the test's own layout
    assert produce_acks(payload, version) == acks
    assert produce_acks(payload[:acks_end], version) == acks
    for cut in range(acks_end):
        with pytest.raises(Incomplete):
            produce_acks(payload[:cut], version)


def test_produce_acks_before_v3_has_no_transactional_id() -> None:
    # Produce v0-v2 (gone in Kafka 4, still spoken by older brokers): acks follows the header.
    payload = struct.pack(">hhi", 0, 2, 1) + classic_string("old") + struct.pack(">hi", 0, 1000)
    assert produce_acks(payload, 2) == 0


def test_produce_acks_rejects_a_negative_string_length() -> None:
    payload = struct.pack(">hhih", 0, 3, 1, -1) + struct.pack(">h", -3) + b"\x00" * 8
    with pytest.raises(Malformed):
        produce_acks(payload, 3)


# -- framing and wire primitives -------------------------------------------------------


def test_frame_prefixes_the_length() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(bytearray(b"")) == b"\x00\x00\x00\x00"


@pytest.mark.parametrize(
    ("raw", "value", "end"),
    [
        (b"\x00", 0, 1),
        (b"\x7f", 127, 1),
        (b"\x80\x01", 128, 2),
        (b"\xff\xff\xff\xff\x0f", 2**32 - 1, 5),
    ],
)
def test_read_uvarint(raw: bytes, value: int, end: int) -> None:
    assert read_uvarint(raw + b"\xff", 0) == (value, end)
    assert uvarint(value) == raw


@pytest.mark.parametrize("value", [0, 2, 127, 128, 300, 2**21, 2**32 - 1])
def test_a_widened_uvarint_reads_as_the_same_value(value: int) -> None:
    minimal = write_uvarint(value)
    assert minimal == uvarint(value)
    for width in range(len(minimal), 6):
        wide = write_uvarint(value, width)
        assert len(wide) == width and read_uvarint(wide + b"\xff", 0) == (value, width)
    with pytest.raises(ValueError, match="at most 5 bytes"):
        write_uvarint(value, 6)


def test_uvarint_longer_than_five_bytes_is_malformed_and_a_cut_one_incomplete() -> None:
    with pytest.raises(Malformed):
        read_uvarint(b"\xff\xff\xff\xff\xff\x01", 0)
    with pytest.raises(Incomplete):
        read_uvarint(b"\xff\xff", 0)


@pytest.mark.parametrize(
    "fields", [{}, {0: b"ab"}, {7: b"", 2: b"x" * 200, 1000: b"\x00"}], ids=["none", "one", "three"]
)
def test_tagged_fields_round_trip_in_ascending_tag_order(fields: dict[int, bytes]) -> None:
    section = tagged_section(fields)
    assert write_tagged_fields(fields) == section
    assert read_tagged_fields(section + b"rest", 0) == (fields, len(section))
    assert skip_tagged_fields(section + b"rest", 0) == len(section)
    for cut in range(len(section)):
        with pytest.raises(Incomplete):
            read_tagged_fields(section[:cut], 0)
        with pytest.raises(Incomplete):
            skip_tagged_fields(section[:cut], 0)


def test_kio_encodes_what_the_tests_hand_build() -> None:
    # The hand-built encoders above are what kio (Kafka's schemas) produce.
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    body = encode(ApiVersionsRequest(client_software_name="ab", client_software_version="1"))
    assert body == b"\x03ab" + b"\x021" + tagged_section()
    assert (
        kio_header(
            KioRequestHeaderV2,
            request_api_key=18,
            request_api_version=3,
            correlation_id=1,
            client_id="c",
        )
        == struct.pack(">hhi", 18, 3, 1) + classic_string("c") + tagged_section()
    )


def test_unknown_key_with_a_header_no_schema_describes_is_read_up_to_the_correlation_id():
    # A vendor key's header version is unknown; a "client id" that does not fit must not
    # make the request malformed (unknown_api_keys closes or forwards it on its own terms).
    header = parse_request_header(struct.pack(">hhi", 10000, 3, 7) + b"\x7f\xff\x01")
    assert (header.api_key, header.api_version, header.correlation_id) == (10000, 3, 7)
    assert (header.client_id, header.body_offset) == (None, 8)


def test_known_key_with_a_truncated_client_id_stays_malformed():
    with pytest.raises(Malformed):
        parse_request_header(struct.pack(">hhi", 3, 1, 7) + b"\x7f\xff\x01")
