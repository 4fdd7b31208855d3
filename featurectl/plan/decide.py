"""The planner's decisions, on the driver: feature levels, blocking gateways, verdicts.

Their inputs are small by construction (catalogue features x live gateways, the
targets, the client software on gated API versions), so they are plain Python over
rows already on the driver: as Spark queries they were ~35 short jobs of the
planner's ~75, each planned, code-generated and JIT-compiled for a few dozen rows
(docs/planner.md#few-spark-jobs).

Inputs:

* catalogue: feature → the catalogue's highest level
* gateway_ids: the live gateways
* support: ``(gateway_id, feature, min_level, max_level)`` per live gateway and feature
  it lists (a gateway that does not list a feature supports level 0 only)
* finalized, targets: feature → level (finalized: levels >= 1 only)
* clients: gated usage rows (``feature``, ``level``, ``requests`` and ``CLIENT``)

Outputs are lists of plain dicts, sorted as ``plan.json`` lists them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

CLIENT = ("client_software_name", "client_software_version")
Support = tuple[str, str, int | None, int | None]


def client_label(row: Mapping[str, Any]) -> str:
    """A client software as the plan names it to people: ``name version``."""
    return f"{row['client_software_name']} {row['client_software_version']}"


def nulls_first(value: Any) -> tuple[bool, Any]:
    """Sort key of one field as Spark's ``sort_array`` orders it: nulls first."""
    return (value is not None, value)


def _support_of(
    support: Iterable[Support],
) -> dict[tuple[str, str], list[tuple[int | None, int | None]]]:
    """(feature, gateway_id) → the support rows listing it (a left join's matches)."""
    found: dict[tuple[str, str], list[tuple[int | None, int | None]]] = defaultdict(list)
    for gateway_id, feature, low, high in support:
        found[(feature, gateway_id)].append((low, high))
    return found


def _matches(
    found: Mapping[tuple[str, str], list[tuple[int | None, int | None]]],
    feature: str,
    gateway_id: str,
) -> list[tuple[int | None, int | None]]:
    return found.get((feature, gateway_id)) or [(None, None)]


def feature_levels(
    catalogue: Mapping[str, int],
    gateway_ids: Sequence[str],
    support: Iterable[Support],
    finalized: Mapping[str, int],
) -> list[dict[str, Any]]:
    """Per catalogue feature: finalized level and the highest level every gateway supports.

    ``cluster_max_level`` is None when no gateway is live (nobody vouches for a level).
    """
    found = _support_of(support)
    gateways = sorted(set(gateway_ids))
    out = []
    for feature in sorted(catalogue):
        rows = [
            (gateway_id, 0 if low is None else low, 0 if high is None else high)
            for gateway_id in gateways
            for low, high in _matches(found, feature, gateway_id)
        ]
        out.append(
            {
                "feature": feature,
                "finalized_level": finalized.get(feature, 0),
                "catalogue_max_level": catalogue[feature],
                "cluster_max_level": min((high for _, _, high in rows), default=None),
                "live_gateways": len(rows),
                "support": [
                    {"gateway_id": g, "min_level": low, "max_level": high}
                    for g, low, high in sorted(rows)
                ],
            }
        )
    return out


def _in_range(level: int, low: int | None, high: int | None) -> bool | None:
    """``level >= low AND level <= high`` with SQL's nulls (unknown AND false is false)."""
    above = None if low is None else level >= low
    below = None if high is None else level <= high
    if above is False or below is False:
        return False
    if above is None or below is None:
        return None
    return True


def blocking_gateways(
    targets: Mapping[str, int], gateway_ids: Sequence[str], support: Iterable[Support]
) -> list[dict[str, Any]]:
    """Per target, the live gateways whose supported range does not include its level.

    A gateway without the feature in its registration supports only level 0 (leaving
    a feature unfinalized always works); ``min_level``/``max_level`` are then None.
    """
    found = _support_of(support)
    out = []
    for feature, level in sorted(targets.items()):
        for gateway_id in sorted(set(gateway_ids)):
            for low, high in _matches(found, feature, gateway_id):
                ok = _in_range(level, low, high)
                if not (level == 0 if ok is None else ok):
                    out.append(
                        {
                            "feature": feature,
                            "level": level,
                            "gateway_id": gateway_id,
                            "min_level": low,
                            "max_level": high,
                        }
                    )
    return out


def kind_of(level: int, current: int) -> str:
    if level == current:
        return "noop"
    if level > current:
        return "upgrade"
    return "disable" if level == 0 else "downgrade"


def verdicts(
    targets: Mapping[str, int],
    finalized: Mapping[str, int],
    blockers: Sequence[Mapping[str, Any]],
    clients: Sequence[Mapping[str, Any]],
    live_gateways: int,
) -> list[dict[str, Any]]:
    """Per target: kind of change, whether applying it now is safe, and what blocks it.

    * upgrade (level above the finalized one): needs a live gateway and no blocker.
    * downgrade (lower, >= 1): no blocker and no client used (in the window) an API
      version that needs a level above the target.
    * disable (level 0): no such client; gateways need not agree (level 0 is always
      supported), as Kafka does not check them when deleting a finalized feature.
    * noop: already finalized at that level.

    ``blocking_requests`` counts the requests of every client above the target level,
    whatever the kind (it is the evidence; only downgrades and disables list clients).
    """
    out = []
    for feature, level in sorted(targets.items()):
        current = finalized.get(feature, 0)
        kind = kind_of(level, current)
        gateways = sorted(
            b["gateway_id"] for b in blockers if b["feature"] == feature and b["level"] == level
        )
        users = [
            c
            for c in clients
            if c["feature"] == feature
            and c["level"] is not None
            and c["level"] > level
            and c["requests"] is not None
            and c["requests"] > 0
        ]
        named = sorted(
            {tuple(c[k] for k in CLIENT) for c in users},
            key=lambda pair: tuple(nulls_first(v) for v in pair),
        )
        blocking_gateways = [] if kind in ("disable", "noop") else gateways
        blocking_clients = (
            [dict(zip(CLIENT, pair, strict=True)) for pair in named]
            if kind in ("downgrade", "disable")
            else []
        )
        if kind == "noop":
            safe = True
        elif kind == "upgrade":
            safe = not blocking_gateways and live_gateways > 0
        elif kind == "downgrade":
            safe = not blocking_gateways and not blocking_clients
        else:
            safe = not blocking_clients
        out.append(
            {
                "feature": feature,
                "level": level,
                "current_level": current,
                "kind": kind,
                "safe": safe,
                "blocking_gateways": blocking_gateways,
                "blocking_clients": blocking_clients,
                "blocking_requests": float(sum(c["requests"] for c in users)) if users else 0.0,
            }
        )
    return out


__all__ = [
    "CLIENT",
    "blocking_gateways",
    "client_label",
    "feature_levels",
    "kind_of",
    "nulls_first",
    "verdicts",
]
