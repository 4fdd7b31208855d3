"""scripts/kafka_protocol/features.py: FeatureDump's output read into featurectl's release
table, and the committed table equal to the one Kafka's jars give today.

``data/feature_dumps.json`` is FeatureDump's real output for Kafka 3.9.2 and 4.0.2, cut
down to a few metadata.versions (3.0-IV1, 3.3-IV3, 3.8-IV0 to 4.1-IV0) and features
(kraft.version, transaction.version, eligible.leader.replicas.version and the
non-production test.feature.version).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from scripts.kafka_protocol import features

DUMPS = Path(__file__).with_name("data") / "feature_dumps.json"
VERSIONS = {"3.9": "3.9.2", "4.0": "4.0.2"}


@pytest.fixture
def dumps() -> dict[str, dict[str, Any]]:
    loaded: dict[str, dict[str, Any]] = json.loads(DUMPS.read_text())
    return loaded


def test_a_release_ships_its_last_iv_and_the_default_levels_there(dumps: dict[str, Any]) -> None:
    document = features.build(dumps, VERSIONS)
    assert document["kafka"] == VERSIONS
    assert document["releases"] == {
        "3.9": {"metadata.version": 21, "kraft.version": 1},
        # ELR 1 bootstraps at 4.1-IV0: 4.0 leaves it at 0, so it is left out.
        "4.0": {"metadata.version": 25, "kraft.version": 1, "transaction.version": 2},
    }


def test_supported_is_what_each_releases_broker_advertises(dumps: dict[str, Any]) -> None:
    supported = features.build(dumps, VERSIONS)["supported"]
    # 3.9: transaction.version's latestProduction is 0 (not advertised); metadata.version
    # from MINIMUM_KRAFT_VERSION (3.0-IV1). The test feature is never listed.
    assert supported["3.9"] == {"metadata.version": [1, 21], "kraft.version": [0, 1]}
    assert supported["4.0"] == {
        "metadata.version": [7, 25],
        "eligible.leader.replicas.version": [0, 1],
        "kraft.version": [0, 1],
        "transaction.version": [0, 2],
    }


def test_dependencies_are_the_production_features_only(dumps: dict[str, Any]) -> None:
    # test.feature.version=2 needs metadata.version 26 in 4.0: not a production feature.
    assert features.build(dumps, VERSIONS)["dependencies"] == {
        "eligible.leader.replicas.version": {"1": {"metadata.version": 23}}
    }


def test_the_newest_jar_disagreeing_with_an_old_release_is_an_error(
    dumps: dict[str, Any],
) -> None:
    changed = copy.deepcopy(dumps)
    changed["4.0"]["metadata_version"]["from_release"]["3.9"] = "3.8-IV0"
    with pytest.raises(features.FeatureDumpError, match=r"newest jar maps 3\.9"):
        features.build(changed, VERSIONS)


def test_a_release_the_jar_does_not_know_is_an_error(dumps: dict[str, Any]) -> None:
    with pytest.raises(features.FeatureDumpError, match=r"does not know release 4\.0"):
        features.release_levels(dumps["3.9"], "4.0")


def test_the_file_has_one_line_per_release_and_reads_back(
    dumps: dict[str, Any], tmp_path: Path
) -> None:
    document = features.build(dumps, VERSIONS)
    path = tmp_path / "levels.json"
    features.write(document, path)
    text = path.read_text()
    assert json.loads(text) == document
    lines = text.splitlines()
    assert '    "3.9": {"metadata.version": 21, "kraft.version": 1},' in lines
    assert (
        '    "4.0": {"metadata.version": 25, "kraft.version": 1, "transaction.version": 2}' in lines
    )
    assert features.diff(document, path) == ""
    document["releases"]["4.0"]["kraft.version"] = 0
    assert '+    "4.0": {"metadata.version": 25, "kraft.version": 0' in features.diff(
        document, path
    )


def test_the_committed_table_is_what_kafkas_jars_give() -> None:
    missing = features.missing_tools()
    if missing:
        pytest.skip(f"generating the table needs {', '.join(missing)} on PATH (a JDK, Maven)")
    changes = features.diff(features.generate())
    assert not changes, f"rerun python -m scripts.kafka_protocol.features:\n{changes}"
