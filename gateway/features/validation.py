"""Validate finalized-feature changes the way ZooKeeper-mode Kafka's controller does.

One function, ``validate_updates``, serves ``featurectl finalize | downgrade | disable``
and UpdateFeatures (key 57) arriving through a gateway, so both answer alike. Rules and
messages follow Kafka's ``KafkaController.validateFeatureUpdate`` (2.7-3.x); every
refusal is INVALID_REQUEST (42), as there. One addition: when live gateways block a
level, the message names them and the range each supports.

Results are per feature. Kafka applied the valid updates of a request and failed the
rest; ``featurectl`` is stricter and writes nothing unless every update is valid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

VersionRange = tuple[int, int]

INVALID_REQUEST = 42
FEATURE_UPDATE_FAILED = 96
CLUSTER_AUTHORIZATION_FAILED = 31


class UpgradeType(IntEnum):
    """UpdateFeatures v1+ ``UpgradeType`` (v0's AllowDowngrade maps to 1 or 2)."""

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    feature: str
    # The new finalized level; < 1 asks to delete (disable) the finalized feature.
    level: int
    upgrade_type: int = UpgradeType.UPGRADE

    @property
    def allows_downgrade(self) -> bool:
        return self.upgrade_type != UpgradeType.UPGRADE


@dataclass(frozen=True, slots=True)
class UpdateResult:
    feature: str
    error_code: int = 0
    message: str | None = None
    # Gateways whose supported range does not include the requested level.
    blocking: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error_code == 0


@dataclass(frozen=True, slots=True)
class Validation:
    results: tuple[UpdateResult, ...]
    # Finalized levels with every valid update applied.
    target: dict[str, int]
    # Finalized levels only if all updates are valid, else None (featurectl's rule).
    all_or_nothing: dict[str, int] | None


def blocking_gateways(
    feature: str, level: int, gateways: Mapping[str, Mapping[str, VersionRange]]
) -> dict[str, str]:
    """Live gateways that cannot serve ``level`` of ``feature``: id -> what it supports."""
    out = {}
    for gateway_id, supported in sorted(gateways.items()):
        rng = supported.get(feature)
        if rng is None:
            out[gateway_id] = f"does not know {feature}"
        elif not rng[0] <= level <= rng[1]:
            out[gateway_id] = f"supports {rng[0]}-{rng[1]}"
    return out


def validate_update(
    update: FeatureUpdate,
    existing: int | None,
    gateways: Mapping[str, Mapping[str, VersionRange]],
) -> tuple[int | None, UpdateResult]:
    """(new level or None to delete, result) for one update against the current level."""
    name = update.feature

    def refuse(message: str, blocking: Iterable[str] = ()) -> tuple[int | None, UpdateResult]:
        return existing, UpdateResult(name, INVALID_REQUEST, message, tuple(blocking))

    if not name:
        return refuse("Feature name can not be empty.")
    if update.upgrade_type not in tuple(UpgradeType):
        return refuse("Received unknown upgrade type.")
    if update.level < 1:
        if not update.allows_downgrade:
            return refuse(
                f"Can not delete finalized feature: '{name}' since allowDowngrade flag is false."
            )
        if existing is None:
            return refuse(f"Can not delete non-existing finalized feature: '{name}'")
        return None, UpdateResult(name)
    if existing is not None:
        if update.level == existing:
            verb = "downgrade" if update.allows_downgrade else "upgrade"
            return refuse(
                f"Can not {verb} a finalized feature: '{name}' from existing "
                f"versionLevel:{existing} to the same value."
            )
        if update.level < existing and not update.allows_downgrade:
            return refuse(
                f"Can not downgrade finalized feature: '{name}' from existing "
                f"versionLevel:{existing} to provided versionLevel:{update.level} without "
                "setting the downgrade flag in the request."
            )
        if update.allows_downgrade and update.level > existing:
            return refuse(
                f"When the downgrade flag is set in the request, the provided "
                f"versionLevel:{update.level} can not be greater than existing "
                f"versionLevel:{existing}."
            )
    elif update.allows_downgrade:
        return refuse(
            f"Can not downgrade finalized feature: '{name}': it is not finalized "
            "(nothing to downgrade from)."
        )
    if not gateways:
        return refuse(
            "Could not apply finalized feature update because no live gateway is registered "
            "to vouch for the level."
        )
    if all(name not in supported for supported in gateways.values()):
        return refuse(
            "Could not apply finalized feature update because the provided feature is not "
            "supported."
        )
    blocking = blocking_gateways(name, update.level, gateways)
    if blocking:
        return refuse(
            "Could not apply finalized feature update because gateways were found to have "
            "incompatible versions for the feature: "
            + ", ".join(f"{gateway_id} ({why})" for gateway_id, why in blocking.items())
            + ".",
            blocking,
        )
    return update.level, UpdateResult(name)


def validate_updates(
    finalized: Mapping[str, int],
    gateways: Mapping[str, Mapping[str, VersionRange]],
    updates: Sequence[FeatureUpdate],
) -> Validation:
    """Validate ``updates`` against the finalized levels and the live gateways' support.

    ``gateways`` maps a gateway id to its supported ranges (from its registration).
    A feature named twice is refused, as Kafka does.
    """
    target = dict(finalized)
    results = []
    seen: set[str] = set()
    for update in updates:
        if update.feature in seen:
            results.append(
                UpdateResult(
                    update.feature,
                    INVALID_REQUEST,
                    f"Feature '{update.feature}' appears more than once in the request.",
                )
            )
            continue
        seen.add(update.feature)
        level, result = validate_update(update, finalized.get(update.feature), gateways)
        results.append(result)
        if result.ok:
            if level is None:
                target.pop(update.feature, None)
            else:
                target[update.feature] = level
    ok = all(r.ok for r in results)
    return Validation(tuple(results), target, dict(target) if ok else None)


__all__ = [
    "CLUSTER_AUTHORIZATION_FAILED",
    "FEATURE_UPDATE_FAILED",
    "INVALID_REQUEST",
    "FeatureUpdate",
    "UpdateResult",
    "UpgradeType",
    "Validation",
    "blocking_gateways",
    "validate_update",
    "validate_updates",
]
