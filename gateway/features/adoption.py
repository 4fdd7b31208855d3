"""Which of the brokers' finalized levels a fresh fleet adopts (pure rules, no I/O).

A Kafka 4.x cluster finalizes group.version, transaction.version, share.version, ... at
format time. A gateway fleet deployed in front of it with an empty ZooKeeper store
would otherwise withhold all of them (the merge takes the lower of the two levels,
``report``), so deploying the gateway would break clients that worked straight to the
cluster. So the first gateway to find no ``feature`` znode writes the levels its broker
reports, once (``FeatureStore.adopt``); from then on the store is the operator's.

What is adopted, feature by feature of the broker's FinalizedFeatures:

* **Not in the gateways' catalogue** (metadata.version, a feature a newer broker adds):
  skipped. The gateways gate nothing of it and hold no level of it, as featurectl's
  ``--release-version`` and UpdateFeatures through a gateway treat metadata.version.
* **In the catalogue**: at the broker's level, lowered to the highest level this gateway
  and every live registered gateway (and ZooKeeper-mode broker sharing the chroot)
  supports, since featurectl finalize would refuse more and a gateway handed a level it
  cannot serve turns unhealthy. Lowered or left out (nothing supported): said why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .catalogue import Catalogue
from .report import FeatureReport

VersionRange = tuple[int, int]

# What this gateway is called where support is named (beside the registered ids).
THIS_GATEWAY = "this gateway"


@dataclass(frozen=True, slots=True)
class Adoption:
    """The levels to write, and each broker level left out or lowered, with why."""

    levels: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def plan_adoption(
    broker: FeatureReport,
    catalogue: Catalogue,
    supported: Mapping[str, VersionRange],
    live: Mapping[str, Mapping[str, VersionRange]],
) -> Adoption:
    """What to adopt from ``broker``'s finalized levels: ``supported`` is this gateway's
    support, ``live`` every live registered server's (``FeatureStore.supported_by_gateway``)."""
    adoption = Adoption()
    for name, level in sorted(broker.finalized.items()):
        if level < 1:
            continue
        if name not in catalogue:
            adoption.skipped[name] = (
                f"finalized {level}; not in the gateways' feature catalogue (the brokers "
                "alone serve it, the gateways gate and hold no level of it)"
            )
            continue
        highs = {THIS_GATEWAY: supported.get(name, (0, 0))[1]}
        highs |= {server: ranges.get(name, (0, 0))[1] for server, ranges in live.items()}
        cap = min(highs.values())
        limiting = ", ".join(sorted(s for s, high in highs.items() if high == cap))
        if cap < 1:
            adoption.skipped[name] = f"finalized {level}; {limiting} cannot serve level 1"
        elif cap < level:
            adoption.skipped[name] = (
                f"finalized {level}; adopted {cap}, the highest level {limiting} supports"
            )
        if cap >= 1:
            adoption.levels[name] = min(level, cap)
    return adoption


__all__ = ["THIS_GATEWAY", "Adoption", "plan_adoption"]
