"""What a gateway supports across its upstreams, and why finalized levels exceed it
(gateway.features.support), with the built-in catalogue.

The run-time side (a gateway refusing to start, or turning unhealthy, over levels it
cannot serve) is in tests/integration/test_features.py; these pin each reason.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.features.catalogue import load_catalogue
from gateway.features.report import NO_FEATURES, FeatureReport
from gateway.features.support import supported_across, unsupported_levels
from gateway.protocol._apis import api_key_of

CATALOGUE = load_catalogue()


def ranges(**apis: tuple[int, int]) -> dict[int, tuple[int, int]]:
    """API ranges by Kafka's API names."""
    out = {}
    for name, versions in apis.items():
        key = api_key_of(name)
        assert key is not None, name
        out[key] = versions
    return out


# group.version 1 gates the whole of ConsumerGroupHeartbeat and ConsumerGroupDescribe.
WITH_KIP_848 = ranges(Produce=(0, 11), ConsumerGroupHeartbeat=(0, 1), ConsumerGroupDescribe=(0, 1))
WITHOUT_KIP_848 = ranges(Produce=(0, 11))


def test_each_feature_is_supported_up_to_the_level_every_upstream_allows() -> None:
    one = supported_across(CATALOGUE, [(WITH_KIP_848, NO_FEATURES)])
    both = supported_across(
        CATALOGUE, [(WITH_KIP_848, NO_FEATURES), (WITHOUT_KIP_848, NO_FEATURES)]
    )

    assert set(one) == set(both) == set(CATALOGUE)
    assert one["group.version"] == (0, 1)
    assert both["group.version"] == (0, 0)
    # transaction.version 1 gates nothing; level 2 needs Produce>=12.
    assert one["transaction.version"] == both["transaction.version"] == (0, 1)


def test_a_broker_that_speaks_for_a_feature_lowers_its_support_to_the_brokers() -> None:
    broker = FeatureReport(supported={"group.version": (0, 0)}, finalized={}, epoch=5)

    support = supported_across(CATALOGUE, [(WITH_KIP_848, broker)])

    assert support["group.version"] == (0, 0)


def test_levels_within_support_or_support_not_yet_known_have_no_problem() -> None:
    support = supported_across(CATALOGUE, [(WITH_KIP_848, NO_FEATURES)])

    assert unsupported_levels({"group.version": 1}, support, CATALOGUE, [WITH_KIP_848]) == []
    assert unsupported_levels({"group.version": 9}, None, CATALOGUE, []) == []


def reasons(levels: Mapping[str, int], upstream: dict[int, tuple[int, int]]) -> list[str]:
    report = FeatureReport(supported={"group.version": (0, 0)}, finalized={}, epoch=5)
    features = report if upstream is WITH_KIP_848 else NO_FEATURES
    support = supported_across(CATALOGUE, [(upstream, features)])
    return unsupported_levels(levels, support, CATALOGUE, [upstream])


def test_each_level_beyond_support_says_why_sorted_by_feature() -> None:
    assert reasons(
        {"zeta.version": 1, "transaction.version": 3, "group.version": 1}, WITHOUT_KIP_848
    ) == [
        "group.version finalized at level 1, supported 0-0 (the upstream lacks "
        "ConsumerGroupDescribe, ConsumerGroupHeartbeat)",
        "transaction.version finalized at level 3, supported 0-1 "
        "(the catalogue only goes up to level 2)",
        "zeta.version finalized at level 1, supported 0-0 "
        "(not in this gateway's feature catalogue)",
    ]


def test_a_level_the_upstream_offers_the_versions_of_but_the_broker_does_not_support() -> None:
    assert reasons({"group.version": 1}, WITH_KIP_848) == [
        "group.version finalized at level 1, supported 0-0 "
        "(the upstream broker does not support that level)"
    ]
