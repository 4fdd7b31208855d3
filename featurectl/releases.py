"""Apache Kafka's default feature levels per release (``--release-version``,
``version-mapping``, ``feature-dependencies``), as ``kafka-features.sh`` knows them.

The table is data (``data/kafka_feature_levels.json``, generated from Kafka's own jars by
``python -m scripts.kafka_protocol.features``, its sources cited inside), so a new Kafka
release is one more JSON line, not code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

METADATA_VERSION = "metadata.version"


@dataclass(frozen=True, slots=True)
class ReleaseTable:
    source: str
    releases: dict[str, dict[str, int]]
    # feature -> level -> {feature it needs: minimum level}
    dependencies: dict[str, dict[int, dict[str, int]]]
    # release -> feature -> (min, max) its brokers support (ApiVersions SupportedFeatures)
    supported_ranges: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)

    def minor(self, release: str) -> str:
        """The table's key for ``release`` ("4.0" or "4.0.1": patch releases ship their
        minor release's levels; "4.0-IV3", the form kafka-features.sh also takes, means
        its release). KeyError names the known ones."""
        parts = re.sub(r"-IV\d+$", "", release.strip()).split(".")
        minor = ".".join(parts[:2])
        if len(parts) > 3 or not all(p.isdigit() for p in parts) or minor not in self.releases:
            raise KeyError(
                f"unknown Apache Kafka release {release!r}; known: {', '.join(self.releases)}"
            )
        return minor

    def levels(self, release: str) -> dict[str, int]:
        """The feature levels Kafka ``release`` ships with (see ``minor``)."""
        minor = self.minor(release)
        # A feature a release does not ship yet is at level 0 there (as version-mapping
        # prints it), so a downgrade to that release disables it.
        everything = {name for levels in self.releases.values() for name in levels}
        return {name: 0 for name in everything} | self.releases[minor]

    def supported(self, release: str) -> dict[str, tuple[int, int]]:
        """{feature: (min, max)} a broker of ``release`` supports (KRaft mode, unstable
        versions off); a feature it lacks is absent, as in its ApiVersions answer."""
        return dict(self.supported_ranges.get(self.minor(release), {}))

    def max_level(self, feature: str) -> int:
        """The highest level of ``feature`` this table knows (a release's or a dependency's)."""
        shipped = [levels.get(feature, 0) for levels in self.releases.values()]
        return max([*shipped, *self.dependencies.get(feature, {})])

    def needs(self, feature: str, level: int) -> dict[str, int]:
        return dict(self.dependencies.get(feature, {}).get(level, {}))


@cache
def release_table() -> ReleaseTable:
    text = resources.files("featurectl").joinpath("data/kafka_feature_levels.json").read_text()
    doc: dict[str, Any] = json.loads(text)
    return ReleaseTable(
        source=doc["source"],
        releases={r: dict(levels) for r, levels in doc["releases"].items()},
        dependencies={
            feature: {int(level): dict(needs) for level, needs in per_level.items()}
            for feature, per_level in doc["dependencies"].items()
        },
        supported_ranges={
            r: {feature: (low, high) for feature, (low, high) in ranges.items()}
            for r, ranges in doc.get("supported", {}).items()
        },
    )


def release_updates(
    release_levels: dict[str, int],
    known: set[str],
    current: dict[str, int],
    command: str,
    supported_max: Mapping[str, int] | None = None,
) -> tuple[dict[str, int], list[str]]:
    """(features to set for an upgrade/downgrade to a release, notes on what was skipped).

    Only features the gateways can serve (``known``: those some live gateway supports at
    level 1 or more, and those finalized) are set; the rest (``metadata.version``, which
    only KRaft has, or a feature the brokers behind the gateways lack) are skipped with a
    note that says what describe shows (``supported_max``: feature -> the highest level
    every live gateway supports, describe's SupportedMaxVersion). A feature already at
    its release level is left alone (nothing to change), and so is one the command's
    direction would not move: ``upgrade`` raises, ``downgrade`` lowers.
    """
    updates: dict[str, int] = {}
    notes: list[str] = []
    for feature, level in sorted(release_levels.items()):
        now = current.get(feature, 0)
        if feature == METADATA_VERSION:
            # The brokers own it (KRaft); a gateway refuses to change it.
            notes.append(
                f"{feature}={level} skipped: the brokers own it "
                "(kafka-features.sh --bootstrap-server BROKER)"
            )
        elif feature not in known:
            if level > 0:
                notes.append(_unservable(feature, level, supported_max))
        elif level == now:
            continue
        elif (level > now) == (command == "finalize"):
            updates[feature] = level
        else:
            direction = "downgrade" if level < now else "upgrade"
            notes.append(f"{feature} stays at {now} (the release has {level}; use {direction})")
    return updates, notes


def _unservable(feature: str, level: int, supported_max: Mapping[str, int] | None) -> str:
    if supported_max is None:
        return f"{feature}={level} skipped: no live gateway supports {feature}"
    high = supported_max.get(feature)
    if high is None:
        return f"{feature}={level} skipped: no live gateway lists {feature}"
    return (
        f"{feature}={level} skipped: the live gateways support {feature} up to level {high} "
        f"only (describe: SupportedMaxVersion {high}; the brokers behind them lack the API "
        "versions it gates)"
    )


__all__ = ["METADATA_VERSION", "ReleaseTable", "release_table", "release_updates"]
