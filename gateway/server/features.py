"""Feature gating at run time: the finalized levels served, what the gateway supports,
and whether the two are compatible.

``FeatureGate`` keeps the finalized levels the gateway enforces (and the version caps
they make) and what it supports, learned from each upstream's ApiVersions. It reads
and watches the levels through its ZooKeeper session (``zookeeper_session``: kazoo's
thread, the registration), writes UpdateFeatures through ``feature_updates``, and takes
the brokers' levels through ``broker_levels``; it is only ever changed on the loop.

Rules (KIP-584, as a Kafka broker applies them):

* The epoch never goes backwards: an update with an older epoch than the one served
  is ignored with a log line (ZooKeeper can replay an old read after a reconnect).
* A finalized level above what this gateway supports: at startup the gateway refuses
  to start; at run time it logs, turns unhealthy and stops accepting connections until
  the levels are compatible again (the reasons: ``gateway.features.support``).
* ZooKeeper outage: the last known levels keep being served (``zookeeper_session``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kazoo.handlers.threading import KazooTimeoutError

from ..features.catalogue import Catalogue, load_catalogue, version_caps
from ..features.report import NO_FEATURES, FeatureReport, enforced_levels
from ..features.store import GatewayIdTaken
from ..features.support import supported_across, unsupported_levels
from ..features.validation import FeatureUpdate, UpdateResult
from ..features.znode import NO_EPOCH, Finalized, Registration
from ..observability.logging import get_logger
from . import feature_updates
from .broker_levels import BrokerAdoption, BrokerLevels
from .zookeeper_session import ZooKeeperSession

if TYPE_CHECKING:
    from ..config import Config
    from ..observability.metrics import Metrics

log = get_logger("gateway.features")

VersionRange = tuple[int, int]


class FeatureStartupError(Exception):
    """The gateway must not start (ZooKeeper unreachable, levels it cannot serve, ...)."""


class FeatureGate(BrokerAdoption):
    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        on_change: Callable[[], None],
        registration: Callable[[], Registration],
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.catalogue: Catalogue = load_catalogue(config.features_catalogue)
        self.enabled = config.zookeeper is not None
        self.finalized = Finalized({}, NO_EPOCH)
        # What this gateway supports; None until an upstream's ApiVersions is known.
        self.supported: dict[str, VersionRange] | None = None
        self.compatible = True
        self.caps: dict[int, int] = version_caps(self.catalogue, {}) if self.enabled else {}
        self._on_change = on_change
        # Per upstream: own ∩ its ranges, and the features it reported.
        self._available: dict[str, tuple[dict[int, VersionRange], FeatureReport]] = {}
        # A worker of a supervised gateway neither registers (the supervisor holds the one
        # registration) nor refuses to start (the supervisor checked once; a restarted
        # worker that finds levels it cannot serve starts paused, as at run time).
        self.registers = True
        self.refuse_at_startup = True
        self.session = ZooKeeperSession(
            config,
            metrics,
            registration,
            may_register=lambda: self.supported is not None and self.registers,
            on_levels=self._apply,
            on_unreadable=self._bad_znode,
        )
        # The brokers' levels; adopted into an empty store once (broker_levels).
        self.brokers = BrokerLevels(metrics)
        self.brokers.adopting = self.enabled and config.adopt_broker_features

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Connect, read the finalized levels and watch them (no-op without ZooKeeper)."""
        if not self.enabled:
            return
        try:
            await self.session.connect()
        except KazooTimeoutError:
            cfg = self.config
            raise FeatureStartupError(
                f"cannot reach ZooKeeper at {cfg.zookeeper} within "
                f"{cfg.zookeeper_timeout_s:g}s (feature levels are kept there)"
            ) from None
        first = await self.session.read()
        # The process that registers adopts (a supervisor, not its workers); one whose
        # probe failed adopts when an answer comes (observe_broker).
        self.brokers.adopting &= self.registers and first.epoch == NO_EPOCH
        adopted = await self._adopt(self.brokers.take_adoption(self.supported))
        self._apply(adopted or first, startup=True)
        self.session.watch()

    async def stop(self, timeout_s: float = 3.0) -> None:
        """Deregister and close the session; bounded, as ZooKeeper may be down."""
        await self.session.stop(timeout_s)

    async def register_now(self) -> None:
        """Register at startup (raises FeatureStartupError if the id is taken)."""
        try:
            await self.session.register_now()
        except GatewayIdTaken as exc:
            raise FeatureStartupError(str(exc)) from None

    # -- what the gateway supports -------------------------------------------------------
    def set_available(
        self,
        upstream: str,
        available: dict[int, VersionRange],
        features: FeatureReport = NO_FEATURES,
    ) -> None:
        """Recompute support after learning an upstream's API ranges (own ∩ upstream) and
        the features it reports: a level needs the versions it gates and, where the
        broker speaks for the feature, the broker's support of that level.

        With several upstreams (cluster mode) the gateway supports what every one allows.
        """
        known = self._available.get(upstream)
        # A new epoch alone changes no support.
        if known is None or known[0] != available or known[1].shape() != features.shape():
            self._learn(upstream, available, features)
        self.observe_broker(upstream, features)

    def _learn(
        self, upstream: str, available: dict[int, VersionRange], features: FeatureReport
    ) -> None:
        self._available[upstream] = (available, features)
        new = supported_across(self.catalogue, self._available.values())
        changed = new != self.supported
        self.supported = new
        for name, (low, high) in new.items():
            self.metrics.feature_supported_min.labels(name).set(low)
            self.metrics.feature_supported_max.labels(name).set(high)
        if changed:
            self._check_compatible(startup=False)
            self.session.schedule_register()

    def report(self) -> FeatureReport:
        """What this gateway alone would report: its support and its finalized levels."""
        return FeatureReport(self.supported or {}, self.finalized.levels, self.finalized.epoch)

    def caps_for(self, upstream: FeatureReport) -> dict[int, int]:
        """Version caps for clients of an upstream that reported ``upstream``: the gateway's
        levels, each lowered to the broker's where the broker knows the feature (a level
        the broker has not finalized would only get clients its refusals)."""
        if not self.enabled or upstream.shape() == NO_FEATURES.shape():
            return self.caps  # a broker that speaks for no feature (Tansu, an answer < v3)
        levels = enforced_levels(self.finalized.levels, upstream, self.catalogue)
        return version_caps(self.catalogue, levels)

    def reload_catalogue(self) -> bool:
        """SIGHUP: re-read features_catalogue; True when it changed. Raises
        CatalogueError (the old catalogue stays) when the file does not load."""
        catalogue = load_catalogue(self.config.features_catalogue)
        if catalogue == self.catalogue:
            return False
        self.catalogue = catalogue
        if self.enabled:
            self.caps = version_caps(catalogue, self.finalized.levels)
        # What is supported is worked out per catalogue: learn every upstream again.
        available, self._available = self._available, {}
        for upstream, (ranges, features) in available.items():
            self.set_available(upstream, ranges, features)
        self._on_change()  # connections renegotiate with the new caps
        return True

    # -- on the loop: the levels the session read ------------------------------------
    def _bad_znode(self, error: Exception) -> None:
        log.error(
            "features.znode_unreadable",
            error=str(error),
            action="keeping the last known finalized levels",
            epoch=self.finalized.epoch,
        )

    def _apply(self, finalized: Finalized, *, startup: bool = False) -> None:
        current = self.finalized
        if finalized.epoch < current.epoch:
            log.warning(
                "features.older_epoch_ignored",
                epoch=finalized.epoch,
                serving_epoch=current.epoch,
            )
            return
        if finalized == current and not startup:
            return
        self.finalized = finalized
        self.caps = version_caps(self.catalogue, finalized.levels)
        m = self.metrics
        m.feature_epoch.set(finalized.epoch)
        for name in set(self.catalogue) | set(finalized.levels) | set(current.levels):
            m.feature_finalized_level.labels(name).set(finalized.level(name))
        log.info(
            "features.finalized",
            epoch=finalized.epoch,
            previous_epoch=current.epoch,
            levels=dict(finalized.levels),
        )
        self._check_compatible(startup=startup)
        self.brokers.compare(finalized.levels, self.supported or {}, self.catalogue)
        self.brokers.adopting &= finalized.epoch == NO_EPOCH  # the operator's from now on
        self._on_change()

    def _check_compatible(self, *, startup: bool) -> None:
        ranges = (ranges for ranges, _ in self._available.values())
        problems = unsupported_levels(self.finalized.levels, self.supported, self.catalogue, ranges)
        if startup and problems and self.refuse_at_startup:
            raise FeatureStartupError(
                "finalized feature levels exceed what this gateway supports: "
                + "; ".join(problems)
                + ". Upgrade this gateway (or its broker), or downgrade the feature with "
                "featurectl downgrade --allow-downgrade"
            )
        was = self.compatible
        self.compatible = not problems
        if problems and was:
            log.error(
                "features.incompatible",
                problems=problems,
                epoch=self.finalized.epoch,
                action="unhealthy; not accepting new connections",
            )
        elif not problems and not was:
            log.info("features.compatible_again", epoch=self.finalized.epoch)
        if was != self.compatible:
            self._on_change()

    # -- UpdateFeatures (key 57) ---------------------------------------------------------
    async def apply_updates(
        self,
        updates: Sequence[FeatureUpdate],
        *,
        validate_only: bool,
        all_or_nothing: bool,
        who: dict[str, object],
        timeout_s: float = 30.0,
    ) -> tuple[list[UpdateResult], int, str | None]:
        """UpdateFeatures through this gateway's session (``feature_updates``): results,
        top-level error, message; a write is answered once this gateway serves it."""
        return await feature_updates.apply_updates(
            self.session.store,
            lambda: self.finalized.epoch,
            updates,
            validate_only=validate_only,
            all_or_nothing=all_or_nothing,
            who=who,
            timeout_s=timeout_s,
        )
