"""kafka-features.sh's offline commands, version-mapping and feature-dependencies, against
featurectl's: Apache Kafka 4.4's own FeatureCommand is the reference (it needs no broker
for these, so the bootstrap address is a closed port), featurectl's release table
(featurectl/data/kafka_feature_levels.json) must give the same levels and dependencies.

The output formats differ on purpose and are parsed: Kafka prints metadata.version first
with its release name (``metadata.version=27 (4.1)``) and the features in its own order;
featurectl prints ``name=level`` sorted, without names.

One test does need a broker: the table's supported ranges for the session's Apache Kafka
release against what that broker's describe says.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from featurectl.releases import release_table
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.integration.test_featurectl import featurectl
from tests.integration.test_kafka_features_tool import (
    ELR,
    TV,
    described,
    direct_bootstrap,
    kafka_features,
    version_mapping,
)

#: FeatureCommand demands a bootstrap server even for commands that send no request.
NO_BROKER = "127.0.0.1:9"


def test_version_mapping_levels_agree_for_every_release_featurectl_knows() -> None:
    for release in release_table().releases:
        args = ("version-mapping", "--release-version", release)
        tool = version_mapping(kafka_features(NO_BROKER, *args))
        assert tool == version_mapping(featurectl(*args)), release


def test_version_mapping_without_a_release_is_the_newest_release() -> None:
    tool = version_mapping(kafka_features(NO_BROKER, "version-mapping"))
    assert version_mapping(featurectl("version-mapping")) == tool


def dependencies(result: subprocess.CompletedProcess[str]) -> dict[str, set[str]]:
    """feature-dependencies output as {"name=level": {"dep=level", ...}}."""
    assert result.returncode == 0, result
    found: dict[str, set[str]] = {}
    current = ""
    for line in result.stdout.splitlines():
        text = re.sub(r" \(\d+\.\d+-IV\d+\)", "", line)
        if text.startswith("    "):
            found[current].add(text.strip())
        else:
            current = text.split()[0]
            found[current] = set()
    return found


def test_feature_dependencies_agree() -> None:
    args = ["feature-dependencies"]
    for item in (
        f"{ELR}=1",
        f"{TV}=2",
        "group.version=1",
        "streams.version=1",
        "metadata.version=25",
    ):
        args += ["--feature", item]
    tool = dependencies(kafka_features(NO_BROKER, *args))
    assert tool == dependencies(featurectl(*args))
    assert tool[f"{ELR}=1"] == {"metadata.version=23"}


def test_feature_dependencies_of_an_undefined_level_is_an_error_in_both() -> None:
    args = ("feature-dependencies", "--feature", "group.version=7")
    tool, ctl = kafka_features(NO_BROKER, *args), featurectl(*args)
    assert tool.returncode == 1
    assert "No feature:group.version with feature level 7" in tool.stderr
    assert ctl.returncode == 1


def test_supported_ranges_are_what_a_broker_of_that_release_describes(
    apache_kafka: ApacheKafkaBroker,
) -> None:
    """The table's ``supported`` (scripts/kafka_protocol/features.py derives it from the
    jar as BrokerFeatures does) against the session's real KRaft broker."""
    if apache_kafka.zookeeper_mode:
        pytest.skip(f"needs a KRaft broker, the session runs {apache_kafka.version}")
    rows = described(kafka_features(direct_bootstrap(apache_kafka), "describe"))
    broker = {
        name: (level(name, low), level(name, high)) for name, (low, high, _, _) in rows.items()
    }
    assert release_table().supported(apache_kafka.version) == broker


def level(name: str, described_level: str) -> int:
    if name != "metadata.version":
        return int(described_level)
    # describe names metadata.version's IVs ("3.3-IV3"): Kafka's version-mapping gives
    # their levels.
    args = ("version-mapping", "--release-version", described_level)
    return version_mapping(kafka_features(NO_BROKER, *args))["metadata.version"]
