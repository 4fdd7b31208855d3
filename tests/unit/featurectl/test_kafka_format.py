"""``describe --output kafka``: kafka-features.sh's describe lines, from featurectl's rows.

The golden lines below were printed by Apache Kafka 4.4.0's own FeatureCommand against
a real broker; tests/integration/test_kafka_features_tool.py compares the formatter with
the running tool through a gateway.
"""

from __future__ import annotations

import pytest

from featurectl.cli import build_parser
from featurectl.features import describe_rows
from featurectl.kafka_format import (
    METADATA_VERSION_NAMES,
    describe_line,
    describe_lines,
    level_text,
    supported_by_all,
)
from featurectl.releases import release_table
from gateway.features.catalogue import parse_catalogue
from gateway.features.znode import Finalized, Registration

# kafka-features.sh describe against Apache Kafka 4.4.0 (KRaft), copied from its stdout.
KAFKA_METADATA_LINE = (
    "Feature: metadata.version                          SupportedMinVersion: 3.3-IV3    "
    "      SupportedMaxVersion: 4.4-IV2          FinalizedVersionLevel: 4.4-IV2          "
    "Epoch: 54"
)
KAFKA_GROUP_LINE = (
    "Feature: group.version                             SupportedMinVersion: 0          "
    "      SupportedMaxVersion: 1                FinalizedVersionLevel: 1                "
    "Epoch: 54"
)


def _registration(gateway_id: str, **features: tuple[int, int]) -> Registration:
    ranges = {name.replace("_", "."): levels for name, levels in features.items()}
    return Registration(gateway_id, f"{gateway_id}:9092", "broker:9092", ranges)


def test_a_line_is_byte_for_byte_what_kafka_features_sh_prints() -> None:
    assert describe_line("group.version", 0, 1, 1, 54) == KAFKA_GROUP_LINE
    assert describe_line("metadata.version", 7, 33, 33, 54) == KAFKA_METADATA_LINE


def test_never_finalized_prints_a_dash_for_the_epoch() -> None:
    line = describe_line("group.version", 0, 1, 0, -1)
    assert line.endswith("FinalizedVersionLevel: 0                Epoch: -")


def test_a_name_longer_than_the_column_is_not_cut() -> None:
    name = "a." * 25 + "version"
    assert describe_line(name, 0, 1, 0, 3).startswith(f"Feature: {name}  SupportedMinVersion: 0 ")


def test_metadata_version_levels_are_release_names_and_unknown_ones_say_so() -> None:
    assert level_text("metadata.version", 21) == "3.9-IV0"
    # Levels 1-6 were removed from MetadataVersion in Kafka 4.0; 0 never was one.
    assert level_text("metadata.version", 6) == "UNKNOWN 6"
    assert level_text("metadata.version", 0) == "UNKNOWN 0"
    assert level_text("group.version", 21) == "21"


@pytest.mark.parametrize("release", sorted(release_table().releases))
def test_each_release_table_level_names_that_release(release: str) -> None:
    """Two data sources agree: the level featurectl's release table gives a release is a
    metadata.version whose name is that release's (3.3 ships 3.3-IV3, 4.0 ships 4.0-IV3)."""
    level = release_table().levels(release)["metadata.version"]
    assert METADATA_VERSION_NAMES[level].startswith(f"{release}-IV")


def test_only_features_every_gateway_lists_are_printed_sorted_by_name() -> None:
    catalogue = parse_catalogue({"features": {"streams.version": {"levels": {"1": []}}}})
    gateways = [
        _registration("gw-a", transaction_version=(0, 2), group_version=(0, 1)),
        _registration("gw-b", transaction_version=(0, 1), group_version=(0, 1)),
        # gw-c lists share.version, the others do not: not supported cluster-wide.
        _registration(
            "gw-c", transaction_version=(0, 2), group_version=(0, 1), share_version=(0, 1)
        ),
    ]
    finalized = Finalized({"group.version": 1, "kraft.version": 1}, 7)
    rows = describe_rows(finalized, gateways, catalogue)
    assert describe_lines(rows, gateways) == [
        describe_line("group.version", 0, 1, 1, 7),
        # The intersection: gw-b holds transaction.version at 1.
        describe_line("transaction.version", 0, 1, 0, 7),
    ]
    assert supported_by_all(gateways) == {"group.version", "transaction.version"}


def test_no_live_gateway_prints_no_line() -> None:
    catalogue = parse_catalogue({"features": {"group.version": {"levels": {"1": []}}}})
    rows = describe_rows(Finalized({"group.version": 1}, 0), [], catalogue)
    assert rows  # the table would show the row, with '-' for the support
    assert describe_lines(rows, []) == []


def test_only_describe_offers_the_kafka_output() -> None:
    parser = build_parser()
    args = parser.parse_args(["describe", "--bootstrap-server", "gw:9092", "--output", "kafka"])
    assert args.output == "kafka"
    with pytest.raises(SystemExit) as refused:
        parser.parse_args(["finalize", "--feature", "group.version=1", "--output", "kafka"])
    assert refused.value.code == 2
