"""Feature gating at run time: ZooKeeper session, watch, registration, health.

``FeatureGate`` keeps the finalized levels the gateway enforces and what it supports,
and talks to ZooKeeper through kazoo. Kazoo calls block and its callbacks run on
kazoo's own thread, so every ZooKeeper call goes through the default executor and
every callback is handed to the event loop with ``call_soon_threadsafe``; the gateway's
state is only ever changed on the loop.

Rules (KIP-584, as a Kafka broker applies them):

* The epoch never goes backwards: an update with an older epoch than the one served
  is ignored with a log line (ZooKeeper can replay an old read after a reconnect).
* A finalized level above what this gateway supports: at startup the gateway refuses
  to start; at run time it logs, turns unhealthy and stops accepting connections until
  the levels are compatible again.
* ZooKeeper outage: the last known levels keep being served;
  ``kafka_gateway_zookeeper_staleness_seconds`` says for how long they have not been
  confirmed. Kazoo reconnects; after a session expiry the gateway registers again and
  re-reads the levels.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooState
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from ..features.catalogue import Catalogue, load_catalogue, missing_for, supported, version_caps
from ..features.report import NO_FEATURES, FeatureReport, enforced_levels, supported_through
from ..features.store import (
    EpochConflict,
    FeatureStore,
    GatewayIdTaken,
    ZooKeeperTls,
    make_client,
)
from ..features.validation import (
    FEATURE_UPDATE_FAILED,
    FeatureUpdate,
    UpdateResult,
    validate_updates,
)
from ..features.znode import NO_EPOCH, Finalized, Registration
from ..observability.logging import get_logger
from .broker_levels import BrokerAdoption, BrokerLevels

if TYPE_CHECKING:
    from kazoo.client import KazooClient

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
        self._registration = registration
        self._client: KazooClient | None = None
        self._store: FeatureStore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connected = False
        self._last_confirmed = time.monotonic()
        self._session_lost = False
        self._registered = False
        # A registration failed on a dropped connection: try again on the next CONNECTED,
        # which may resume the same session (nothing else would trigger it).
        self._register_on_reconnect = False
        # Per upstream: own ∩ its ranges, and the features it reported.
        self._available: dict[str, tuple[dict[int, VersionRange], FeatureReport]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # A worker of a supervised gateway neither registers (the supervisor holds the one
        # registration) nor refuses to start (the supervisor checked once; a restarted
        # worker that finds levels it cannot serve starts paused, as at run time).
        self.registers = True
        self.refuse_at_startup = True
        # The brokers' levels; adopted into an empty store once (broker_levels).
        self.brokers = BrokerLevels(metrics)
        self.brokers.adopting = self.enabled and config.adopt_broker_features
        metrics.zookeeper_staleness.set_function(self.staleness_s)

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Connect, read the finalized levels and watch them (no-op without ZooKeeper)."""
        if not self.enabled:
            return
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        assert cfg.zookeeper is not None
        client = make_client(
            cfg.zookeeper,
            auth=cfg.zookeeper_auth,
            timeout_s=cfg.zookeeper_timeout_s,
            tls=zookeeper_tls(cfg),
            sasl=cfg.zookeeper_sasl,
        )
        self._client = client
        self._store = FeatureStore(client, cfg.zookeeper_chroot, auth=cfg.zookeeper_auth)
        try:
            await self._loop.run_in_executor(None, client.start, cfg.zookeeper_timeout_s)
        except KazooTimeoutError:
            await self._loop.run_in_executor(None, client.stop)
            raise FeatureStartupError(
                f"cannot reach ZooKeeper at {cfg.zookeeper} within "
                f"{cfg.zookeeper_timeout_s:g}s (feature levels are kept there)"
            ) from None
        self._set_connected(True)
        client.add_listener(self._on_state)
        first = await self._loop.run_in_executor(None, self._store.read)
        # The process that registers adopts (a supervisor, not its workers); one whose
        # probe failed adopts when an answer comes (observe_broker).
        self.brokers.adopting &= self.registers and first.epoch == NO_EPOCH
        adopted = await self._adopt(self.brokers.take_adoption(self.supported))
        self._apply(adopted or first, startup=True)
        self._store.watch(self._on_watch)

    async def stop(self, timeout_s: float = 3.0) -> None:
        """Deregister and close the session; bounded, as ZooKeeper may be down."""
        client = self._client
        if client is None:
            return
        loop = asyncio.get_running_loop()
        if self._registered and self._store is not None and self._connected:
            try:
                await asyncio.wait_for(
                    loop.run_in_executor(None, self._store.deregister, self._gateway_id()),
                    timeout_s,
                )
                log.info("features.deregistered", gateway_id=self._gateway_id())
            except (KazooException, TimeoutError) as exc:
                # The ephemeral node goes with the session anyway.
                log.warning("features.deregister_failed", error=repr(exc))
        self._loop = None  # late kazoo callbacks must not reach a closing loop
        try:
            await asyncio.wait_for(loop.run_in_executor(None, client.stop), timeout_s)
            await asyncio.wait_for(loop.run_in_executor(None, client.close), timeout_s)
        except TimeoutError:
            log.warning("features.zookeeper_close_timed_out", timeout_s=timeout_s)
        # Stopped once: an upgrade in place releases the registration before shutdown.
        self._client = None

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
        per_upstream = [
            supported_through(supported(self.catalogue, a), f) for a, f in self._available.values()
        ]
        new = {name: (0, min(s[name][1] for s in per_upstream)) for name in self.catalogue}
        changed = new != self.supported
        self.supported = new
        for name, (low, high) in new.items():
            self.metrics.feature_supported_min.labels(name).set(low)
            self.metrics.feature_supported_max.labels(name).set(high)
        if changed:
            self._check_compatible(startup=False)
            self._schedule_register()

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

    def unsupported_levels(self, finalized: Finalized) -> list[str]:
        """Why ``finalized`` exceeds this gateway's support ([] when compatible)."""
        if self.supported is None:
            return []
        problems = []
        for name, level in sorted(finalized.levels.items()):
            high = self.supported.get(name, (0, 0))[1]
            if level <= high:
                continue
            spec = self.catalogue.get(name)
            if spec is None:
                why = "not in this gateway's feature catalogue"
            elif level > spec.max_level:
                why = f"the catalogue only goes up to level {spec.max_level}"
            else:
                missing = {
                    str(g) for a, _ in self._available.values() for g in missing_for(spec, level, a)
                }
                why = (
                    "the upstream lacks " + ", ".join(sorted(missing))
                    if missing
                    else "the upstream broker does not support that level"
                )
            problems.append(f"{name} finalized at level {level}, supported 0-{high} ({why})")
        return problems

    # -- ZooKeeper callbacks (kazoo's thread) → the loop ----------------------------------
    def _on_watch(self, finalized: Finalized | None, error: Exception | None) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if error is not None:
            loop.call_soon_threadsafe(self._bad_znode, error)
        elif finalized is not None:
            loop.call_soon_threadsafe(self._apply, finalized)

    def _on_state(self, state: str) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._state_changed, state)

    # -- on the loop -------------------------------------------------------------------
    def _state_changed(self, state: str) -> None:
        log.warning("features.zookeeper_state", state=str(state), zookeeper=self.config.zookeeper)
        if state == KazooState.CONNECTED:
            self._set_connected(True)
            if self._session_lost:
                # A new session: our ephemeral registration is gone and the watch may have
                # missed changes; register again and re-read.
                self._session_lost = False
                self._register_on_reconnect = False
                self._schedule_register()
                self._schedule_reread()
            elif self._register_on_reconnect:
                self._register_on_reconnect = False
                self._schedule_register()
        else:
            self._set_connected(False)
            if state == KazooState.LOST:
                self._session_lost = True
                self._registered = False

    def _set_connected(self, connected: bool) -> None:
        # Connected: confirmed now. Just disconnected: confirmed until now.
        if connected or self._connected:
            self._last_confirmed = time.monotonic()
        self._connected = connected
        self.metrics.zookeeper_connected.set(1 if connected else 0)

    def staleness_s(self) -> float:
        """Seconds the served levels have gone unconfirmed (0 while connected)."""
        if not self.enabled or self._connected:
            return 0.0
        return time.monotonic() - self._last_confirmed

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
        problems = self.unsupported_levels(self.finalized)
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
        """Validate and write updates as ZooKeeper-mode Kafka's controller does.

        Returns (per-feature results, top-level error, message). ``all_or_nothing``
        (UpdateFeatures v2) writes nothing unless every update is valid; v0/v1 apply the
        valid ones. Like Kafka, the answer waits until this gateway serves the new epoch.
        """
        store = self._store
        loop = asyncio.get_running_loop()
        if store is None:
            return [], FEATURE_UPDATE_FAILED, "feature gating is not connected to ZooKeeper"

        def work() -> tuple[list[UpdateResult], tuple[int, int] | None]:
            finalized = store.read()
            validation = validate_updates(finalized.levels, store.supported_by_gateway(), updates)
            results = list(validation.results)
            target = validation.all_or_nothing if all_or_nothing else validation.target
            if validate_only or target is None or target == dict(finalized.levels):
                return results, None
            try:
                epoch = store.write(target, finalized.epoch, old=finalized.levels, who=who)
            except EpochConflict as exc:
                return [
                    r if not r.ok else UpdateResult(r.feature, FEATURE_UPDATE_FAILED, str(exc))
                    for r in results
                ], None
            return results, (finalized.epoch, epoch)

        try:
            results, change = await loop.run_in_executor(None, work)
        except KazooException as exc:
            message = f"ZooKeeper is unavailable: {exc!r}"
            failed = [UpdateResult(u.feature, FEATURE_UPDATE_FAILED, message) for u in updates]
            return failed, 0 if not all_or_nothing else FEATURE_UPDATE_FAILED, message
        log.info(
            "features.update_features_request",
            updates=[f"{u.feature}={u.level}/{int(u.upgrade_type)}" for u in updates],
            validate_only=validate_only,
            errors={r.feature: r.message for r in results if not r.ok},
            epoch=f"{change[0]} -> {change[1]}" if change else None,
            **who,
        )
        if change is not None:
            deadline = loop.time() + timeout_s
            while self.finalized.epoch < change[1] and loop.time() < deadline:
                await asyncio.sleep(0.005)
        return results, 0, None

    # -- registration ---------------------------------------------------------------
    def _gateway_id(self) -> str:
        return self._registration().gateway_id

    def _schedule_register(self) -> None:
        if (
            self._store is None
            or self._loop is None
            or self.supported is None
            or not self.registers
        ):
            return
        self._spawn(self._register())

    async def _register(self, *, at_startup: bool = False) -> None:
        store = self._store
        assert store is not None and self._loop is not None
        registration = self._registration()
        try:
            await self._loop.run_in_executor(None, store.register, registration)
        except GatewayIdTaken as exc:
            if at_startup:
                raise FeatureStartupError(str(exc)) from None
            log.error("features.register_failed", error=str(exc))
            return
        except KazooException as exc:
            log.warning("features.register_failed", error=repr(exc), retry="on reconnect")
            self._register_on_reconnect = True
            return
        self._registered = True
        log.info(
            "features.registered",
            gateway_id=registration.gateway_id,
            path=store.paths.gateway(registration.gateway_id),
            features={k: list(v) for k, v in registration.features.items()},
        )

    def _schedule_reread(self) -> None:
        if self._store is None or self._loop is None:
            return
        store = self._store

        async def reread() -> None:
            assert self._loop is not None
            try:
                finalized = await self._loop.run_in_executor(None, store.read)
            except KazooException as exc:
                log.warning("features.reread_failed", error=repr(exc))
                return
            self._apply(finalized)

        self._spawn(reread())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._tasks.add(task)  # held so it is not garbage-collected mid-flight
        task.add_done_callback(self._tasks.discard)

    async def register_now(self) -> None:
        """Register at startup (raises FeatureStartupError if the id is taken)."""
        if self._store is not None and self.supported is not None and self.registers:
            await self._register(at_startup=True)


def zookeeper_tls(cfg: Config) -> ZooKeeperTls | None:
    """The [zookeeper_tls] settings, or None when TLS to ZooKeeper is off."""
    if not cfg.zookeeper_tls:
        return None
    return ZooKeeperTls(
        cfg.zookeeper_tls_ca,
        cfg.zookeeper_tls_cert,
        cfg.zookeeper_tls_key,
        cfg.zookeeper_tls_check_hostname,
    )
