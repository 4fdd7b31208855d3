"""What ``featurectl describe | finalize | downgrade | disable`` computes and prints.

Pure functions only: the CLI reads the finalized levels and the live registrations from
ZooKeeper (``gateway.features.store``), hands them here, and prints what comes back, so
every row, message and JSON document is a plain unit test.

Vocabulary follows ``kafka-features.sh``: a gateway *supports* a range of levels of a
feature, the cluster has one *finalized* level per feature (0 = not finalized), and the
finalized levels carry an *epoch* (-1 before anything was ever finalized).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.table import Table

from gateway.features.catalogue import Catalogue
from gateway.features.store import EpochConflict
from gateway.features.validation import (
    FeatureUpdate,
    UpdateResult,
    UpgradeType,
    Validation,
    validate_updates,
)
from gateway.features.znode import NO_EPOCH, Finalized, Registration

VersionRange = tuple[int, int]

# A gateway whose registration does not list a feature can serve none of its levels,
# which is what validation assumes too ("does not know" blocks every level >= 1).
_UNKNOWN_FEATURE: VersionRange = (0, 0)

COMMANDS = ("finalize", "downgrade", "disable")


# --------------------------------------------------------------------------------------
# describe
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FeatureRow:
    """One line of ``describe``: what every live gateway can serve and what is finalized."""

    feature: str
    # The intersection over all live gateways (max of mins, min of maxes); None when no
    # gateway is live, as nothing can vouch for any level then.
    supported_min: int | None
    supported_max: int | None
    finalized_level: int
    epoch: int
    # Gateways whose supported max is the cluster-wide one while another gateway could
    # go higher: the ones holding the feature back. Empty when all agree.
    limited_by: tuple[str, ...]
    description: str | None
    # The lowest level the live gateways' brokers finalized (their registrations'
    # broker_finalized_features); None when no live gateway's broker reports features.
    broker_finalized: int | None = None

    @property
    def withheld(self) -> bool:
        """The brokers finalized more than the gateways hold: clients get the lower."""
        return self.broker_finalized is not None and self.broker_finalized > self.finalized_level


def _range_of(registration: Registration, feature: str) -> VersionRange:
    return registration.features.get(feature, _UNKNOWN_FEATURE)


def describe_rows(
    finalized: Finalized, registrations: Sequence[Registration], catalogue: Catalogue
) -> list[FeatureRow]:
    """A row per feature known to the catalogue, any live gateway or the finalized levels."""
    names = set(catalogue) | set(finalized.levels)
    for registration in registrations:
        names |= set(registration.features)
    rows = []
    for name in sorted(names):
        ranges = {r.gateway_id: _range_of(r, name) for r in registrations}
        low = max((lo for lo, _ in ranges.values()), default=None)
        high = min((hi for _, hi in ranges.values()), default=None)
        limited: tuple[str, ...] = ()
        if high is not None and any(hi > high for _, hi in ranges.values()):
            limited = tuple(sorted(g for g, (_, hi) in ranges.items() if hi == high))
        spec = catalogue.get(name)
        brokers = [
            r.broker_finalized.get(name, 0) for r in registrations if r.broker_finalized is not None
        ]
        rows.append(
            FeatureRow(
                feature=name,
                supported_min=low,
                supported_max=high,
                finalized_level=finalized.level(name),
                epoch=finalized.epoch,
                limited_by=limited,
                description=spec.description if spec is not None else None,
                broker_finalized=min(brokers) if brokers else None,
            )
        )
    return rows


def withheld_line(feature: str, brokers: int, held: int, supported_max: int | None) -> str:
    """The brokers finalized ``brokers`` of ``feature``, the gateways hold ``held``
    (lower): what describe and the plan say, with what to run where the gateways can
    serve more."""
    target = min(brokers, supported_max or 0)
    return f"{feature}: brokers finalized {brokers}, gateways hold {held}; clients get {held}" + (
        f" (featurectl finalize --feature {feature}={target} to serve {target})"
        if target > held
        else " (no level above it is supported by every live gateway)"
    )


def withheld_lines(rows: Iterable[FeatureRow]) -> list[str]:
    """describe's line per feature the brokers finalized above the gateways' level."""
    return [
        withheld_line(
            row.feature, row.broker_finalized or 0, row.finalized_level, row.supported_max
        )
        for row in rows
        if row.withheld
    ]


def describe_document(
    finalized: Finalized, rows: Iterable[FeatureRow], registrations: Iterable[Registration]
) -> dict[str, Any]:
    """The ``describe --output json`` document (keys documented in ``--help``)."""
    return {
        "epoch": finalized.epoch,
        "features": [
            {
                "feature": row.feature,
                "description": row.description,
                "supported_min_version": row.supported_min,
                "supported_max_version": row.supported_max,
                "finalized_version_level": row.finalized_level,
                "limited_by": list(row.limited_by),
                "broker_finalized_version_level": row.broker_finalized,
            }
            for row in rows
        ],
        "gateways": [
            {
                "id": r.gateway_id,
                "listener": r.listener,
                "upstream": r.upstream,
                "broker_software_name": r.broker_software_name,
                "broker_software_version": r.broker_software_version,
                "gateway_version": r.gateway_version,
                "metrics_url": r.metrics_url,
                "features": {
                    name: {"min_version": low, "max_version": high}
                    for name, (low, high) in sorted(r.features.items())
                },
            }
            for r in registrations
        ],
    }


def epoch_text(epoch: int) -> str:
    """An epoch as kafka-features prints it: '-' when nothing was ever finalized."""
    return "-" if epoch == NO_EPOCH else str(epoch)


def _level_text(level: int | None) -> str:
    return "-" if level is None else str(level)


def _table() -> Table:
    # No vertical rules and no outer edge: each row is one whitespace-separated line
    # that grep/awk can take apart, as with kafka-features' own output.
    return Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)


def features_table(rows: Iterable[FeatureRow]) -> Table:
    table = _table()
    for column in (
        "Feature",
        "SupportedMinVersion",
        "SupportedMaxVersion",
        "FinalizedVersionLevel",
        "Epoch",
        "LimitedBy",
    ):
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(
            row.feature,
            _level_text(row.supported_min),
            _level_text(row.supported_max),
            str(row.finalized_level),
            epoch_text(row.epoch),
            ",".join(row.limited_by) or "-",
        )
    return table


def gateways_table(registrations: Iterable[Registration]) -> Table:
    table = _table()
    for column in ("Gateway", "Listener", "Upstream", "BrokerSoftware", "GatewayVersion"):
        table.add_column(column, no_wrap=True)
    for r in registrations:
        software = f"{r.broker_software_name} {r.broker_software_version}"
        if r.broker_software_name == r.broker_software_version == "unknown":
            software = "unknown"
        table.add_row(r.gateway_id, r.listener, r.upstream or "-", software, r.gateway_version)
    return table


# --------------------------------------------------------------------------------------
# finalize | downgrade | disable
# --------------------------------------------------------------------------------------


def feature_updates(
    command: str, features: Sequence[tuple[str, int]], *, unsafe: bool = False
) -> list[FeatureUpdate]:
    """The FeatureUpdates a command asks for; ``disable`` is a downgrade to level 0."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}")
    if command == "finalize":
        kind = UpgradeType.UPGRADE
    else:
        kind = UpgradeType.UNSAFE_DOWNGRADE if unsafe else UpgradeType.SAFE_DOWNGRADE
    return [
        FeatureUpdate(name, 0 if command == "disable" else level, kind) for name, level in features
    ]


@dataclass(frozen=True, slots=True)
class Change:
    feature: str
    old: int
    new: int


@dataclass(frozen=True, slots=True)
class Plan:
    """An update validated against the finalized levels (and epoch) it was read with."""

    command: str
    read: Finalized
    validation: Validation

    @property
    def ok(self) -> bool:
        return self.validation.all_or_nothing is not None

    @property
    def target(self) -> dict[str, int]:
        """The finalized levels to write; only meaningful when ``ok``."""
        return self.validation.target

    @property
    def errors(self) -> list[UpdateResult]:
        return [r for r in self.validation.results if not r.ok]

    @property
    def changes(self) -> list[Change]:
        if not self.ok:
            return []
        return [
            Change(r.feature, self.read.level(r.feature), self.target.get(r.feature, 0))
            for r in self.validation.results
        ]


def plan_updates(
    command: str,
    finalized: Finalized,
    gateways: Mapping[str, Mapping[str, VersionRange]],
    updates: Sequence[FeatureUpdate],
) -> Plan:
    """Validate ``updates`` as ZooKeeper-mode Kafka would (see ``validate_updates``)."""
    return Plan(command, finalized, validate_updates(finalized.levels, gateways, updates))


def answered_plan(
    command: str,
    finalized: Finalized,
    updates: Sequence[FeatureUpdate],
    results: Sequence[UpdateResult],
) -> Plan:
    """A plan from a gateway's UpdateFeatures answer (``--bootstrap-server``): its
    per-feature results, and the levels they lead to from what ApiVersions reported."""
    target = dict(finalized.levels)
    for update, result in zip(updates, results, strict=False):
        if not result.ok:
            continue
        if update.level < 1:
            target.pop(update.feature, None)
        else:
            target[update.feature] = update.level
    ok = len(results) == len(updates) and all(r.ok for r in results)
    validation = Validation(tuple(results), target, dict(target) if ok else None)
    return Plan(command, finalized, validation)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a plan: rejected, dry run, written (new epoch) or lost a race."""

    plan: Plan
    dry_run: bool = False
    new_epoch: int | None = None
    conflict: EpochConflict | None = None

    @property
    def ok(self) -> bool:
        return self.plan.ok and self.conflict is None


def conflict_message(conflict: EpochConflict) -> str:
    return (
        "conflict: finalized features changed concurrently "
        f"(epoch {epoch_text(conflict.expected)} → {epoch_text(conflict.actual)}); re-run"
    )


def outcome_lines(outcome: Outcome) -> tuple[list[str], list[str]]:
    """(stdout lines, stderr lines) of a finalize/downgrade/disable in table mode."""
    plan = outcome.plan
    if not plan.ok:
        errors = [f"error: {r.feature}: {r.message}" for r in plan.errors]
        if len(plan.errors) < len(plan.validation.results):
            errors.append("nothing written: featurectl applies every update or none")
        return [], errors
    if outcome.conflict is not None:
        return [], [conflict_message(outcome.conflict)]
    out = [f"{c.feature}: {c.old} → {c.new}" for c in plan.changes]
    old_epoch = epoch_text(plan.read.epoch)
    if outcome.new_epoch is None:
        out += [f"epoch: {old_epoch}", "(dry run: nothing written)"]
    else:
        out.append(f"epoch: {old_epoch} → {outcome.new_epoch}")
    return out, []


def outcome_document(outcome: Outcome) -> dict[str, Any]:
    """The ``--output json`` document of finalize/downgrade/disable (keys in ``--help``)."""
    plan = outcome.plan
    conflict = outcome.conflict
    return {
        "command": plan.command,
        "ok": outcome.ok,
        "dry_run": outcome.dry_run,
        "old_epoch": plan.read.epoch,
        "new_epoch": outcome.new_epoch,
        "changes": [{"feature": c.feature, "from": c.old, "to": c.new} for c in plan.changes],
        "errors": [
            {
                "feature": r.feature,
                "error_code": r.error_code,
                "message": r.message,
                "blocking_gateways": list(r.blocking),
            }
            for r in plan.errors
        ],
        "conflict": None
        if conflict is None
        else {"expected_epoch": conflict.expected, "actual_epoch": conflict.actual},
    }


__all__ = [
    "COMMANDS",
    "Change",
    "FeatureRow",
    "Outcome",
    "Plan",
    "answered_plan",
    "conflict_message",
    "describe_document",
    "describe_rows",
    "epoch_text",
    "feature_updates",
    "features_table",
    "gateways_table",
    "outcome_document",
    "outcome_lines",
    "plan_updates",
]
