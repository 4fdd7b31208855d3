"""How the gateway's feature levels merge with the upstream broker's (gateway.features.report).

The integration side (Java Admin's describeFeatures through a gateway in front of Kafka
4.x) is in tests/integration/test_upstream_features.py; these pin the rules themselves.
"""

from __future__ import annotations

import datetime
import itertools

from kio.schema.api_versions.v0.response import ApiVersion as V0Key
from kio.schema.api_versions.v0.response import ApiVersionsResponse as V0Response
from kio.schema.api_versions.v3.response import (
    ApiVersion,
    ApiVersionsResponse,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta, i64

from gateway.features.report import (
    NO_FEATURES,
    FeatureReport,
    enforced_levels,
    merge_reports,
    merged_epoch,
    supported_through,
)
from gateway.versions import parse_upstream_api_versions
from tests.harness import encode

CATALOGUE = ("group.version", "transaction.version", "share.version")

# A Kafka 4.4 report (levels seen on a real broker) with share.version supported but not
# finalized, on purpose: the gating tests below rest on that. test_adoption's KAFKA_44 is a
# freshly formatted 4.4's, which finalizes share.version 2: not the same report.
KAFKA_44 = FeatureReport(
    supported={
        "metadata.version": (7, 33),
        "kraft.version": (0, 1),
        "group.version": (0, 1),
        "transaction.version": (0, 2),
        "share.version": (0, 2),
    },
    finalized={"metadata.version": 33, "group.version": 1, "transaction.version": 2},
    epoch=120,
)


def gateway_report(levels: dict[str, int], epoch: int) -> FeatureReport:
    return FeatureReport(
        supported={"group.version": (0, 1), "transaction.version": (0, 2), "share.version": (0, 1)},
        finalized=levels,
        epoch=epoch,
    )


def test_a_feature_the_catalogue_does_not_gate_is_reported_as_the_broker_reports_it() -> None:
    merged = merge_reports(gateway_report({}, -1), KAFKA_44, CATALOGUE, gating=True)
    assert merged.supported["metadata.version"] == (7, 33)
    assert merged.supported["kraft.version"] == (0, 1)
    assert merged.finalized["metadata.version"] == 33


def test_a_feature_both_know_is_supported_where_both_support_it() -> None:
    merged = merge_reports(gateway_report({}, -1), KAFKA_44, CATALOGUE, gating=True)
    assert merged.supported["share.version"] == (0, 1)  # gateway 0-1, broker 0-2
    assert merged.supported["transaction.version"] == (0, 2)


def test_disjoint_support_drops_the_feature_from_supported() -> None:
    broker = FeatureReport(supported={"group.version": (2, 3)})
    merged = merge_reports(gateway_report({}, -1), broker, CATALOGUE, gating=True)
    assert "group.version" not in merged.supported


def test_a_feature_both_know_is_finalized_at_the_lower_level() -> None:
    # The broker finalized group.version 1; the gateways have not: clients get 0.
    merged = merge_reports(gateway_report({}, 3), KAFKA_44, CATALOGUE, gating=True)
    assert "group.version" not in merged.finalized
    # Both at 1: 1. The gateways at 2 and the broker at 1 (transaction.version): 1.
    both = merge_reports(
        gateway_report({"group.version": 1, "transaction.version": 2}, 4),
        FeatureReport(KAFKA_44.supported, {"group.version": 1, "transaction.version": 1}, 9),
        CATALOGUE,
        gating=True,
    )
    assert both.finalized["group.version"] == 1
    assert both.finalized["transaction.version"] == 1


def test_a_catalogue_feature_the_broker_does_not_know_keeps_the_gateways_level() -> None:
    # Tansu reports no features at all.
    merged = merge_reports(
        gateway_report({"group.version": 1}, 0), NO_FEATURES, CATALOGUE, gating=True
    )
    assert merged.finalized == {"group.version": 1}
    assert merged.epoch == 0
    assert merged.supported == gateway_report({}, 0).supported


def test_without_gating_the_brokers_levels_are_reported() -> None:
    merged = merge_reports(gateway_report({}, -1), KAFKA_44, CATALOGUE, gating=False)
    assert merged.finalized == dict(KAFKA_44.finalized)
    assert merged.epoch == KAFKA_44.epoch


def test_enforced_levels_lower_the_gateways_level_to_the_brokers() -> None:
    assert enforced_levels({"group.version": 1, "share.version": 1}, KAFKA_44, CATALOGUE) == {
        "group.version": 1,
        "transaction.version": 0,
        "share.version": 0,  # the broker supports share.version but has not finalized it
    }
    assert enforced_levels({"group.version": 1}, NO_FEATURES, CATALOGUE)["group.version"] == 1


def test_the_merged_epoch_is_the_single_source_when_only_one_has_an_epoch() -> None:
    assert merged_epoch(-1, -1) == -1
    assert merged_epoch(-1, 57) == 57
    assert merged_epoch(4, -1) == 4


def test_the_merged_epoch_moves_whenever_either_source_moves_and_never_back() -> None:
    # Every path of both sources moving forward (from "none" up), one step at a time.
    for steps in itertools.product((0, 1), repeat=8):
        gateway_epoch, upstream_epoch = -1, -1
        previous = merged_epoch(gateway_epoch, upstream_epoch)
        for step in steps:
            if step:
                gateway_epoch += 1
            else:
                upstream_epoch += 1
            current = merged_epoch(gateway_epoch, upstream_epoch)
            assert current > previous, (steps, gateway_epoch, upstream_epoch)
            previous = current


def test_an_upstream_answer_is_read_with_its_features() -> None:
    body = encode(
        ApiVersionsResponse(
            error_code=ErrorCode.none,
            api_keys=(ApiVersion(api_key=i16(18), min_version=i16(0), max_version=i16(4)),),
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
            supported_features=(
                SupportedFeatureKey(
                    name="metadata.version", min_version=i16(7), max_version=i16(33)
                ),
            ),
            finalized_features_epoch=i64(120),
            finalized_features=(
                FinalizedFeatureKey(
                    name="metadata.version", max_version_level=i16(33), min_version_level=i16(33)
                ),
            ),
        )
    )
    ranges, report = parse_upstream_api_versions(body, 3)
    assert ranges == {18: (0, 4)}
    assert report == FeatureReport({"metadata.version": (7, 33)}, {"metadata.version": 33}, 120)
    # A v0 answer carries no features.
    assert parse_upstream_api_versions(_v0_body(), 0)[1] == NO_FEATURES


def _v0_body() -> bytes:
    return encode(
        V0Response(
            error_code=ErrorCode.none,
            api_keys=(V0Key(api_key=i16(18), min_version=i16(0), max_version=i16(4)),),
        )
    )


# Kafka 3.9 in ZooKeeper mode: features on (an epoch), none listed.
ZOOKEEPER_MODE_39 = FeatureReport(epoch=0)


def test_a_kafka_feature_left_out_by_a_feature_aware_broker_is_level_0_only() -> None:
    support = {"group.version": (0, 1), "test.version": (0, 2)}
    assert supported_through(support, ZOOKEEPER_MODE_39) == {
        "group.version": (0, 0),  # Kafka's feature: the broker cannot serve level 1
        "test.version": (0, 2),  # the gateways' own feature: no broker speaks for it
    }
    assert supported_through(support, NO_FEATURES) == support  # Tansu: nothing known
    assert supported_through(support, KAFKA_44) == {"group.version": (0, 1), "test.version": (0, 2)}
    levels = {"group.version": 1, "test.version": 2}
    catalogue = ("group.version", "test.version")
    assert enforced_levels(levels, ZOOKEEPER_MODE_39, catalogue) == {
        "group.version": 0,
        "test.version": 2,
    }
    merged = merge_reports(
        FeatureReport(support, levels, 5), ZOOKEEPER_MODE_39, catalogue, gating=True
    )
    assert merged.supported == {"test.version": (0, 2)}
    assert merged.finalized == {"test.version": 2}
    assert merged.epoch == 6


def test_no_finalized_level_is_reported_above_the_supported_range() -> None:
    # Kafka 4.4 finalizes share.version 2; the gateways' catalogue lists level 1 only.
    broker = FeatureReport({"share.version": (0, 2)}, {"share.version": 2}, 7)
    own = FeatureReport({"share.version": (0, 1)}, {}, -1)
    assert merge_reports(own, broker, CATALOGUE, gating=False).finalized == {"share.version": 1}
    gated = merge_reports(
        FeatureReport({"share.version": (0, 1)}, {"share.version": 1}, 0),
        broker,
        CATALOGUE,
        gating=True,
    )
    assert gated.finalized == {"share.version": 1}
    assert gated.supported["share.version"] == (0, 1)
