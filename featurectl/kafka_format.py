"""``featurectl describe --output kafka``: the lines Apache Kafka's ``kafka-features.sh
describe`` prints, byte for byte, so scripts written for that tool parse featurectl's.

The format is FeatureCommand's (Apache Kafka 4.4, ``tools/.../FeatureCommand.java``):

    Feature: %-40s  SupportedMinVersion: %-15s  SupportedMaxVersion: %-15s  \
FinalizedVersionLevel: %-15s  Epoch: %s

one line per feature the answering side *supports*, sorted by name; a feature that is
finalized but not supported is not printed (Kafka prints only ``supportedFeatures``).
``metadata.version`` levels are printed as their release names (``4.4-IV2``), a level
that Kafka 4.4 no longer knows as ``UNKNOWN <level>``, the epoch as ``-`` before
anything was finalized (the Java client has no epoch then). Older releases (3.x, and
Kafka's sources as late as October 2024) separated the same fields with tabs; this
module follows 4.4, the release the integration tests run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gateway.features.znode import Registration

from .features import FeatureRow
from .releases import METADATA_VERSION

#: The ``--output`` choices of ``describe`` (the update commands keep table and json).
DESCRIBE_OUTPUTS = ("table", "json", "kafka")


#: metadata.version feature level -> release name, from Apache Kafka 4.4.0's
#: ``MetadataVersion.VERSIONS`` (levels 1-6, 3.0-IV1 to 3.3-IV2, were dropped in 4.0, so
#: the 4.4 tool prints them as ``UNKNOWN n``; 34 is the unreleased 4.5-IV0 it also knows).
METADATA_VERSION_NAMES: dict[int, str] = {
    7: "3.3-IV3",
    8: "3.4-IV0",
    9: "3.5-IV0",
    10: "3.5-IV1",
    11: "3.5-IV2",
    12: "3.6-IV0",
    13: "3.6-IV1",
    14: "3.6-IV2",
    15: "3.7-IV0",
    16: "3.7-IV1",
    17: "3.7-IV2",
    18: "3.7-IV3",
    19: "3.7-IV4",
    20: "3.8-IV0",
    21: "3.9-IV0",
    22: "4.0-IV0",
    23: "4.0-IV1",
    24: "4.0-IV2",
    25: "4.0-IV3",
    26: "4.1-IV0",
    27: "4.1-IV1",
    28: "4.2-IV0",
    29: "4.2-IV1",
    30: "4.3-IV0",
    31: "4.4-IV0",
    32: "4.4-IV1",
    33: "4.4-IV2",
    34: "4.5-IV0",
}

_DESCRIBE_LINE = (
    "Feature: {feature:<40}  SupportedMinVersion: {low:<15}  SupportedMaxVersion: {high:<15}"
    "  FinalizedVersionLevel: {level:<15}  Epoch: {epoch}"
)


def level_text(feature: str, level: int) -> str:
    """A level as kafka-features.sh prints it (FeatureCommand.levelToString)."""
    if feature != METADATA_VERSION:
        return str(level)
    return METADATA_VERSION_NAMES.get(level, f"UNKNOWN {level}")


def describe_line(feature: str, low: int, high: int, level: int, epoch: int) -> str:
    """One ``kafka-features.sh describe`` line; ``epoch`` < 0 means never finalized."""
    return _DESCRIBE_LINE.format(
        feature=feature,
        low=level_text(feature, low),
        high=level_text(feature, high),
        level=level_text(feature, level),
        epoch=epoch if epoch >= 0 else "-",
    )


def supported_by_all(registrations: Iterable[Registration]) -> set[str]:
    """The features every one of ``registrations`` lists (none when there are none): what
    "supported" means for kafka-features.sh, whose broker lists only its own."""
    names: set[str] | None = None
    for registration in registrations:
        listed = set(registration.features)
        names = listed if names is None else names & listed
    return names or set()


def describe_lines(rows: Sequence[FeatureRow], registrations: Sequence[Registration]) -> list[str]:
    """``describe --output kafka``: a line per row whose feature every answering gateway
    supports (with --bootstrap-server that is the one gateway that answered)."""
    supported = supported_by_all(registrations)
    return [
        describe_line(
            row.feature, row.supported_min, row.supported_max, row.finalized_level, row.epoch
        )
        for row in sorted(rows, key=lambda r: r.feature)
        if row.feature in supported
        and row.supported_min is not None
        and row.supported_max is not None
    ]


__all__ = [
    "DESCRIBE_OUTPUTS",
    "METADATA_VERSION_NAMES",
    "describe_line",
    "describe_lines",
    "level_text",
    "supported_by_all",
]
