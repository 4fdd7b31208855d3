"""Version negotiation, the upstream ApiVersions parser and the release fingerprint."""

from __future__ import annotations

import datetime
import io
import itertools
import json
import struct
from pathlib import Path

import pytest
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i16, i32Timedelta

from gateway.protocol import api_spec, known_api_keys
from gateway.versions import (
    APACHE_KAFKA,
    SKIPPED_KEYS,
    UNKNOWN_SOFTWARE,
    ApiVersionsError,
    BrokerSoftware,
    Release,
    fingerprint,
    gateway_supported,
    negotiate,
    parse_api_versions_response,
    release_tracks,
)

DATA = Path(__file__).resolve().parents[1] / "data"


def tansu_ranges() -> dict[int, tuple[int, int]]:
    data = json.loads((DATA / "tansu-0.6.0-api-versions.json").read_text())
    return {key: (low, high) for key, low, high in data["api_keys"]}


def as_ranges(release: Release) -> dict[int, tuple[int, int]]:
    return {key: (0, high) for key, high in release.max_versions.items()}


def release(track: str, name: str) -> Release:
    return next(r for r in release_tracks()[track] if r.name == name)


def encode(entity: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


# --- gateway_supported / negotiate ----------------------------------------------------


def test_gateway_supported_is_every_version_of_every_release() -> None:
    supported = gateway_supported()
    assert sorted(supported) == known_api_keys()
    for key, (low, high) in supported.items():
        spec = api_spec(key)
        assert spec is not None
        assert (low, high) == (spec.min_version, spec.max_version)
    assert supported[18] == (0, 5)  # Kafka 4.4 added ApiVersions v5
    assert supported[0] == (0, 13)  # Produce v0-2: Kafka 3.9's, which 4.0 removed
    assert {93, 94} <= set(supported)  # keys 4.4 added


def test_gateway_supported_returns_a_fresh_dict() -> None:
    first = gateway_supported()
    first.clear()
    assert gateway_supported()


def test_negotiate_intersects_per_key() -> None:
    own = {0: (3, 13), 1: (4, 18), 3: (0, 13), 18: (0, 4)}
    upstream = {0: (0, 11), 1: (0, 17), 3: (0, 12), 18: (0, 3)}
    assert negotiate(own, upstream) == {0: (3, 11), 1: (4, 17), 3: (0, 12), 18: (0, 3)}


def test_negotiate_passes_what_the_gateway_does_not_limit() -> None:
    # Limits only bound the keys they name: key 1000 (newer than any spec the gateway
    # read) passes as the upstream offers it; key 60, which the upstream lacks, is out.
    own = {0: (3, 13), 60: (0, 2)}
    upstream = {0: (0, 11), 1: (0, 17), 1000: (0, 1)}
    assert negotiate(own, upstream) == {0: (3, 11), 1: (0, 17), 1000: (0, 1)}


def test_negotiate_drops_empty_intersections() -> None:
    # An old upstream whose whole Produce range is below what the gateway decodes.
    assert negotiate({0: (3, 13)}, {0: (0, 2)}) == {}


def test_negotiate_applies_caps() -> None:
    own = {0: (3, 13), 26: (0, 5), 68: (0, 1), 3: (0, 13)}
    upstream = {0: (0, 13), 26: (0, 5), 68: (0, 1), 3: (0, 13)}
    # transaction.version 1 withholds Produce v12+ and EndTxn v5+; group.version 0 hides
    # ConsumerGroupHeartbeat (cap below its min); Metadata has no cap.
    caps = {0: 11, 26: 4, 68: -1, 1000: 3}
    assert negotiate(own, upstream, caps) == {0: (3, 11), 26: (0, 4), 3: (0, 13)}


def test_negotiate_cap_above_max_changes_nothing() -> None:
    assert negotiate({0: (3, 13)}, {0: (0, 11)}, {0: 99}) == {0: (3, 11)}


def test_negotiate_cap_equal_to_min_keeps_one_version() -> None:
    assert negotiate({0: (3, 13)}, {0: (0, 11)}, {0: 3}) == {0: (3, 3)}


def test_negotiate_against_tansu() -> None:
    result = negotiate(gateway_supported(), tansu_ranges())
    assert result[0] == (0, 11)  # Produce: Tansu's own range
    assert result[3] == (0, 12)
    assert 68 not in result  # Tansu has no ConsumerGroupHeartbeat
    assert 71 in result  # GetTelemetrySubscriptions: both know it


# --- parse_api_versions_response ------------------------------------------------------


def v3_body(keys: dict[int, tuple[int, int]], error: ErrorCode = ErrorCode.none) -> bytes:
    return encode(
        ApiVersionsResponse(
            error_code=error,
            api_keys=tuple(
                ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                for k, (lo, hi) in keys.items()
            ),
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        )
    )


def test_parse_v3_response() -> None:
    body = v3_body({0: (0, 11), 18: (0, 4)})
    assert parse_api_versions_response(body, 3) == {0: (0, 11), 18: (0, 4)}


def test_parse_v0_response() -> None:
    body = encode(
        ApiVersionsResponseV0(
            error_code=ErrorCode.none,
            api_keys=(ApiVersionV0(api_key=i16(3), min_version=i16(0), max_version=i16(5)),),
        )
    )
    assert parse_api_versions_response(body, 0) == {3: (0, 5)}


def test_parse_too_new_answer_falls_back_to_v0_and_raises_with_key_18() -> None:
    # A broker answers a too-new request in the v0 format with error 35 and key 18 only.
    body = struct.pack(">hi", 35, 1) + struct.pack(">hhh", 18, 0, 3)
    with pytest.raises(ApiVersionsError) as caught:
        parse_api_versions_response(body, 4)
    assert caught.value.error_code == 35
    assert caught.value.ranges == {18: (0, 3)}


def test_parse_ignores_tags_kio_does_not_know() -> None:
    # Another gateway upstream adds KIP-885 tags; kio alone would refuse the body.
    body = v3_body({0: (0, 11)})
    assert body.endswith(b"\x00")
    extra = b"\x02" + b"\x90\x4e\x02\x02x" + b"\x91\x4e\x02\x02y"
    assert parse_api_versions_response(body[:-1] + extra, 3) == {0: (0, 11)}


def test_parse_garbage_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse_api_versions_response(b"\x00\x00\x05", 3)


# --- release tables -------------------------------------------------------------------


def test_tables_cover_2_0_to_4_1_at_least() -> None:
    names = {r.name for rows in release_tracks().values() for r in rows}
    for wanted in ("2.0", "2.8", "3.0", "3.7", "3.9", "4.0", "4.1"):
        assert wanted in names


# KRaft 2.8 (early access) served UnregisterBroker (64) on the broker listener; 3.0's spec
# moved it to the controller alone.
KRAFT_2_8_ONLY = {("2.8", "3.0", 64)}


@pytest.mark.parametrize("track", ["zookeeper", "kraft"])
def test_each_release_is_at_least_its_predecessor(track: str) -> None:
    # Catches a generator slip: client-facing versions only ever go up.
    rows = release_tracks()[track]
    for older, newer in itertools.pairwise(rows):
        for key, high in older.max_versions.items():
            if key in SKIPPED_KEYS or (older.name, newer.name, key) in KRAFT_2_8_ONLY:
                continue
            assert key in newer.max_versions, (older.name, newer.name, key)
            assert newer.max_versions[key] >= high, (older.name, newer.name, key)


def test_rows_are_read_from_the_newest_patch_and_keep_minimums() -> None:
    assert release("zookeeper", "3.9").kafka == "3.9.2"  # the ZooKeeper-mode test broker
    assert release("kraft", "4.4").kafka == "4.4.0"
    assert release("kraft", "4.4").versions[0] == (0, 13)  # Produce from v0 (KAFKA-18659)
    assert release("kraft", "4.4").versions[1][0] == 4  # Fetch v0-3 gone (KIP-896)
    assert release("zookeeper", "3.9").versions[1] == (0, 17)
    assert 71 not in release("kraft", "4.4").versions  # telemetry: only when configured


# Where the generated tables (each release's own jar) and franz-go's kversion tables
# (tests/unit/data/franz-go-kversion-max-versions.json, the file these tables replaced)
# disagree, and why the jar is right. Value: (franz-go's max, ours); None = key absent.
FRANZ_GO_DISAGREES = {
    # 0.10.2.2's own ApiVersionsResponse.API_VERSIONS_RESPONSE lists OffsetFetch 0-2:
    # KIP-88 (KAFKA-3853) shipped in 0.10.2.0; franz-go adds v2 with 0.11.0.
    ("zookeeper", "0.10.2", 9): (1, 2),
    # DescribeQuorum's spec names the broker listener from 2.8 on (the broker forwards it
    # to the controller); franz-go lists it on KRaft brokers from 3.3 only.
    ("kraft", "3.0", 55): (None, 0),
    ("kraft", "3.1", 55): (None, 0),
    ("kraft", "3.2", 55): (None, 0),
    # Envelope (58, skipped by fingerprint) is controller-only in 3.0's and 3.1's specs.
    ("kraft", "3.0", 58): (0, None),
    ("kraft", "3.1", 58): (0, None),
    # Telemetry (71/72, skipped by fingerprint) is advertised only with a client-telemetry
    # reporter configured; the generated tables leave it out, franz-go lists it from 3.7.
    **{("kraft", r, k): (0, None) for r in ("3.7", "3.8", "3.9", "4.0", "4.1", "4.2",
                                           "4.3", "4.4") for k in (71, 72)},
}  # fmt: skip


def test_franz_go_tables_agree_but_where_explained() -> None:
    franz = json.loads((DATA / "franz-go-kversion-max-versions.json").read_text())["tracks"]
    found = {}
    for track, rows in franz.items():
        for row in rows:
            theirs = {int(k): v for k, v in row["max_versions"].items()}
            ours = release(track, row["release"]).max_versions
            for key in sorted(set(theirs) | set(ours)):
                if theirs.get(key) != ours.get(key):
                    found[(track, row["release"], key)] = (theirs.get(key), ours.get(key))
    assert found == FRANZ_GO_DISAGREES
    # And the generated tables have every franz-go row, plus KRaft 2.8 (early access).
    extra = {(t, r.name) for t, rows in release_tracks().items() for r in rows} - {
        (t, row["release"]) for t, rows in franz.items() for row in rows
    }
    assert extra == {("kraft", "2.8")}


def test_no_release_goes_beyond_the_specs_the_gateway_read() -> None:
    # The gateway's protocol data is the union of every release's specs: every version a
    # release's broker advertises is one the gateway knows.
    beyond = set()
    for rows in release_tracks().values():
        for r in rows:
            for key, high in r.max_versions.items():
                spec = api_spec(key)
                if spec is None or high > spec.max_version:
                    beyond.add((r.name, key))
    assert beyond == set()


def test_spot_check_known_release_facts() -> None:
    assert release("zookeeper", "2.8").max_versions[60] == 0  # DescribeCluster (KIP-700)
    assert 60 not in release("zookeeper", "2.7").max_versions
    assert release("kraft", "3.7").max_versions[0] == 10  # Produce v10 (KIP-951)
    assert release("kraft", "3.9").max_versions[18] == 4  # ApiVersions v4
    assert release("kraft", "4.0").max_versions[3] == 13  # Metadata v13
    assert 68 in release("kraft", "3.7").max_versions  # ConsumerGroupHeartbeat


# --- fingerprint ----------------------------------------------------------------------

# 3.3 and 3.4 differ only in inter-broker keys, which are skipped.
SAME_AS_NEXT = {"3.3": "3.3-3.4", "3.4": "3.3-3.4"}


@pytest.mark.parametrize(
    ("track", "name"),
    [(t, r.name) for t, rows in release_tracks().items() for r in rows],
)
def test_every_release_row_is_recognised(track: str, name: str) -> None:
    got = fingerprint(as_ranges(release(track, name)))
    assert got == BrokerSoftware(APACHE_KAFKA, SAME_AS_NEXT.get(name, name))


def test_exact_3_7() -> None:
    assert fingerprint(as_ranges(release("kraft", "3.7"))) == ("Apache Kafka", "3.7")


def test_min_versions_do_not_matter() -> None:
    ranges = {k: (hi, hi) for k, (_lo, hi) in as_ranges(release("kraft", "4.0")).items()}
    assert fingerprint(ranges) == ("Apache Kafka", "4.0")


def test_skipped_keys_do_not_matter() -> None:
    ranges = as_ranges(release("zookeeper", "3.7"))
    for key in (4, 5, 6, 7, 27, 56, 57, 58, 67):
        ranges.pop(key, None)
    ranges[71] = (0, 0)  # telemetry appears only when configured
    ranges[72] = (0, 0)
    assert fingerprint(ranges) == ("Apache Kafka", "3.7")


def test_between_two_releases() -> None:
    ranges = as_ranges(release("kraft", "3.7"))
    ranges[0] = (0, 11)  # Produce already at 3.8's version, the rest still 3.7
    assert fingerprint(ranges) == ("Apache Kafka", "3.7-3.8")


def test_newer_than_every_release() -> None:
    ranges = as_ranges(release("kraft", "4.4"))
    ranges[0] = (0, 14)
    assert fingerprint(ranges) == ("Apache Kafka", ">=4.4")
    ranges = as_ranges(release("kraft", "4.4"))
    ranges[95] = (0, 0)  # a key no release has
    assert fingerprint(ranges) == ("Apache Kafka", ">=4.4")


def test_the_newest_releases_are_told_apart() -> None:
    # 4.3 raised DescribeLogDirs to v5; 4.4 ApiVersions to v5 and added keys 93 and 94
    # (franz-go's kversion tables, checked against a real 4.4 broker in
    # tests/integration/test_upstream_features.py).
    assert fingerprint(as_ranges(release("kraft", "4.2"))).version == "4.2"
    assert fingerprint(as_ranges(release("kraft", "4.3"))).version == "4.3"
    assert fingerprint(as_ranges(release("kraft", "4.4"))).version == "4.4"


def test_custom_mix_is_unknown() -> None:
    ranges = as_ranges(release("kraft", "3.7"))
    ranges[0] = (0, 11)  # newer than 3.7 here ...
    del ranges[61]  # ... but missing DescribeProducers, which every later release has
    assert fingerprint(ranges) == UNKNOWN_SOFTWARE


def test_nothing_is_unknown() -> None:
    assert fingerprint({}) == UNKNOWN_SOFTWARE
    assert fingerprint({0: (0, 2), 1: (0, 2)}) == UNKNOWN_SOFTWARE


def test_tansu_fixture_is_what_tansu_0_6_advertises() -> None:
    tansu = tansu_ranges()
    assert tansu[18] == (0, 4)  # ApiVersions up to v4 (not v3) in the captured answer
    assert tansu[3] == (0, 12)  # Metadata
    assert tansu[60] == (0, 1)  # DescribeCluster
    assert tansu[26] == (0, 4)  # EndTxn
    assert tansu[28] == (0, 4)  # TxnOffsetCommit
    assert 68 not in tansu
    assert len(tansu) == 36


def test_tansu_is_not_apache_kafka() -> None:
    # Tansu has Produce v11 (3.8+) but lacks OffsetForLeaderEpoch, DeleteAcls,
    # AlterConfigs, ... which every release since 0.11 has.
    assert fingerprint(tansu_ranges()) == UNKNOWN_SOFTWARE


def test_gateway_own_table_is_no_single_release() -> None:
    # The union of every release's specs is a mix no broker advertises (controller-only
    # keys, 3.x's removed versions): at least the newest release in every key.
    assert fingerprint(gateway_supported()) == ("Apache Kafka", ">=4.4")
