"""The levels the upstream brokers finalized, against the levels the gateways hold.

Two uses (``FeatureGate`` holds one ``BrokerLevels`` and calls ``adopt_levels``):

* **Adoption**: a fleet whose ZooKeeper has no ``feature`` znode takes its brokers'
  levels once, before its first client where the broker answered the start-up probe
  (rules: ``gateway.features.adoption``; the atomic write: ``FeatureStore.adopt``).
* **Never withheld silently**: once the store is the operator's, a broker that
  finalizes a level above the gateways' (an upgrade on the brokers, a feature the store
  lacks) shows in ``kafka_gateway_feature_broker_finalized_level{feature,upstream}``,
  in one ``features.broker_ahead`` line per change (rate-limited), and, through the
  registration's ``broker_finalized_features``, in ``featurectl describe``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kazoo.exceptions import KazooException

from ..features.adoption import plan_adoption
from ..features.catalogue import Catalogue
from ..features.report import FeatureReport
from ..features.znode import NO_EPOCH, Finalized
from ..observability.logging import RateLimitedLogger, get_logger

if TYPE_CHECKING:
    from ..features.store import FeatureStore
    from ..observability.metrics import Metrics
    from .zookeeper_session import ZooKeeperSession

log = get_logger("gateway.features")
limited = RateLimitedLogger("gateway.features")

VersionRange = tuple[int, int]


class BrokerLevels:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        # Per upstream, the last answer that carried features (an epoch).
        self._reports: dict[str, FeatureReport] = {}
        # (feature, upstream) -> (broker level, held, supported) last logged as ahead.
        self._told: dict[tuple[str, str], tuple[int, int, int]] = {}
        # Whether this process may still adopt: gating on, adopt_broker_features, the
        # process that registers, and no feature znode seen yet.
        self.adopting = False

    def observe(self, upstream: str, report: FeatureReport) -> bool | None:
        """Record ``upstream``'s answer: None when it says what its last one did (every
        connection's answer comes here: nothing to do again), else whether
        ``finalized()`` changed by it (the registration says it)."""
        if report.epoch == NO_EPOCH:
            return None  # Tansu, Kafka in ZooKeeper mode: no levels to speak of
        known = self._reports.get(upstream)
        if known is not None and known.shape() == report.shape():
            return None  # KRaft's epoch moves with every topic change; the levels did not
        before = self.finalized()
        self._reports[upstream] = report
        return self.finalized() != before

    def take_adoption(
        self, supported: Mapping[str, VersionRange] | None
    ) -> tuple[str, FeatureReport] | None:
        """The upstream and answer to adopt from, once: None until one is known (and
        what this gateway supports with it), and ever after the first."""
        found = next(iter(self._reports.items()), None)
        if not self.adopting or found is None or supported is None:
            return None
        self.adopting = False
        return found

    def finalized(self) -> dict[str, int] | None:
        """The brokers' finalized levels (the lowest over upstreams); None: none known."""
        if not self._reports:
            return None
        reports = list(self._reports.values())
        names = set().union(*(r.finalized for r in reports))
        return {n: min(r.finalized.get(n, 0) for r in reports) for n in sorted(names)}

    def compare(
        self, held: Mapping[str, int], supported: Mapping[str, VersionRange], catalogue: Catalogue
    ) -> None:
        """Set the metric; log each catalogue feature a broker finalized above ``held``."""
        for upstream, report in self._reports.items():
            for name in catalogue:
                if not report.knows(name):
                    continue
                level, have = report.finalized.get(name, 0), held.get(name, 0)
                self._metrics.feature_broker_finalized.labels(name, upstream).set(level)
                state = (level, have, supported.get(name, (0, 0))[1])
                if level <= have:
                    self._told.pop((name, upstream), None)
                elif self._told.get((name, upstream)) != state:
                    self._told[(name, upstream)] = state
                    self._tell(name, upstream, *state)

    def _tell(self, name: str, upstream: str, level: int, have: int, can: int) -> None:
        fields = {
            "feature": name,
            "upstream": upstream,
            "broker_finalized": level,
            "gateways_hold": have,
            "gateway_supports": can,
        }
        if min(level, can) > have:
            limited.warning(
                "features.broker_ahead",
                limit_key=(name, upstream),
                **fields,
                consequence=f"clients get {name} {have}, not the brokers' {level}",
                action=f"featurectl finalize --feature {name}={min(level, can)}",
            )
        else:
            limited.info(
                "features.broker_ahead",
                limit_key=(name, upstream),
                **fields,
                consequence=f"this gateway (catalogue and upstream) serves {name} up to {can}",
            )


class BrokerAdoption:
    """The brokers' levels role of ``FeatureGate``: what every answer of an upstream
    tells it (``observe_broker``), and adopting them into an empty store."""

    # Of the FeatureGate that takes this role.
    brokers: BrokerLevels
    catalogue: Catalogue
    finalized: Finalized
    supported: dict[str, VersionRange] | None
    session: ZooKeeperSession

    def _apply(self, finalized: Finalized, *, startup: bool = False) -> None: ...

    def observe_broker(self, upstream: str, features: FeatureReport) -> None:
        """What ``upstream`` finalized (each of its answers; a supervisor's readiness
        probe): the metric, a line when the brokers are ahead, the registration, and an
        adoption the start-up probe could not do (the broker was down then)."""
        changed = self.brokers.observe(upstream, features)
        if changed is None:
            return
        if changed:
            self.session.schedule_register()
        if self.session.loop is None:
            return  # not started, or gating off: the store's levels are not known (yet)
        self.brokers.compare(self.finalized.levels, self.supported or {}, self.catalogue)
        found = self.brokers.take_adoption(self.supported)
        if found is not None:
            self.session.spawn(self._adopt_later(found))

    async def _adopt(self, found: tuple[str, FeatureReport] | None) -> Finalized | None:
        """Adopt ``found`` (upstream, answer); what the store holds after, or None."""
        store = self.session.store
        if found is None or store is None:
            return None
        who = {"principal": "kafka-gateway", "address": self.session.gateway_id()}
        try:
            return await adopt_levels(store, *found, self.catalogue, self.supported or {}, who)
        except KazooException as exc:
            # Not retried: the operator can finalize by hand, and the metric and the
            # broker_ahead line say what is withheld meanwhile.
            log.warning("features.adopt_failed", upstream=found[0], error=repr(exc))
            return None

    async def _adopt_later(self, found: tuple[str, FeatureReport]) -> None:
        adopted = await self._adopt(found)
        if adopted is not None:
            self._apply(adopted)


async def adopt_levels(
    store: FeatureStore,
    upstream: str,
    report: FeatureReport,
    catalogue: Catalogue,
    supported: Mapping[str, VersionRange],
    who: Mapping[str, object],
) -> Finalized | None:
    """Adopt ``report``'s levels into an empty store (blocking calls in the executor).
    Returns the levels the store now holds, or None when it still has no znode (nothing
    adoptable: metadata.version alone, or nothing this fleet supports)."""

    def work() -> Finalized | None:
        plan = plan_adoption(report, catalogue, supported, store.supported_by_gateway())
        if not plan.levels:
            log.info("features.nothing_to_adopt", upstream=upstream, skipped=plan.skipped)
            return None
        epoch = store.adopt(plan.levels, upstream=upstream, skipped=plan.skipped, who=who)
        if epoch is None:
            found = store.read()
            log.info("features.not_adopted", reason="the store exists", epoch=found.epoch)
            return found
        return Finalized(dict(plan.levels), epoch)

    return await asyncio.get_running_loop().run_in_executor(None, work)


__all__ = ["BrokerAdoption", "BrokerLevels", "adopt_levels"]
