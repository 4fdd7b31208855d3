"""The gateway's ZooKeeper session: connecting, its state, how stale what it read is,
and the gateway's registration, which lives and dies with the session.

Kazoo calls block and its callbacks run on kazoo's own thread, so every ZooKeeper call
goes through the default executor and every callback is handed to the event loop with
``call_soon_threadsafe``. This module is that boundary: ``FeatureGate``
(``gateway.server.features``) holds the levels and is only ever called on the loop,
with the levels this session read (``on_levels``) or word that they did not read
(``on_unreadable``).

Session rules:

* ZooKeeper outage: the gate keeps serving the last known levels;
  ``kafka_gateway_zookeeper_staleness_seconds`` says for how long they have not been
  confirmed. Kazoo reconnects.
* After a session expiry the ephemeral registration is gone and the watch may have
  missed changes: register again and re-read the levels.
* A registration that failed on a dropped connection is tried again on the next
  CONNECTED, which may resume the same session (nothing else would trigger it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooState
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from ..features.store import FeatureStore, GatewayIdTaken, ZooKeeperTls, make_client
from ..features.znode import Finalized, Registration
from ..observability.logging import get_logger

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from ..config import Config
    from ..observability.metrics import Metrics

log = get_logger("gateway.features")


class ZooKeeperSession:
    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        registration: Callable[[], Registration],
        *,
        may_register: Callable[[], bool],
        on_levels: Callable[[Finalized], None],
        on_unreadable: Callable[[Exception], None],
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.enabled = config.zookeeper is not None
        self.client: KazooClient | None = None
        self.store: FeatureStore | None = None
        # The gateway's loop from connect() to stop(); None: kazoo callbacks are dropped.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.connected = False
        self._last_confirmed = time.monotonic()
        self._session_lost = False
        self._registered = False
        self._register_on_reconnect = False
        self._registration = registration
        # Whether this process registers now (it knows its support; not a worker).
        self._may_register = may_register
        self._on_levels = on_levels
        self._on_unreadable = on_unreadable
        self._tasks: set[asyncio.Task[None]] = set()
        metrics.zookeeper_staleness.set_function(self.staleness_s)

    # -- lifecycle ---------------------------------------------------------------------
    async def connect(self) -> FeatureStore:
        """Start the session; raises KazooTimeoutError when ZooKeeper does not answer
        within zookeeper_timeout_s (the client is stopped again then)."""
        self.loop = asyncio.get_running_loop()
        cfg = self.config
        assert cfg.zookeeper is not None
        client = make_client(
            cfg.zookeeper,
            auth=cfg.zookeeper_auth,
            timeout_s=cfg.zookeeper_timeout_s,
            tls=zookeeper_tls(cfg),
            sasl=cfg.zookeeper_sasl,
        )
        self.client = client
        self.store = FeatureStore(client, cfg.zookeeper_chroot, auth=cfg.zookeeper_auth)
        try:
            await self.loop.run_in_executor(None, client.start, cfg.zookeeper_timeout_s)
        except KazooTimeoutError:
            await self.loop.run_in_executor(None, client.stop)
            raise
        self._set_connected(True)
        client.add_listener(self._on_state)
        return self.store

    async def read(self) -> Finalized:
        """The finalized levels in the store now."""
        assert self.loop is not None and self.store is not None
        return await self.loop.run_in_executor(None, self.store.read)

    def watch(self) -> None:
        """Hand every later change of the levels to ``on_levels`` (or ``on_unreadable``)."""
        assert self.store is not None
        self.store.watch(self._on_watch)

    async def stop(self, timeout_s: float = 3.0) -> None:
        """Deregister and close the session; bounded, as ZooKeeper may be down."""
        client = self.client
        if client is None:
            return
        loop = asyncio.get_running_loop()
        if self._registered and self.store is not None and self.connected:
            try:
                await asyncio.wait_for(
                    loop.run_in_executor(None, self.store.deregister, self.gateway_id()),
                    timeout_s,
                )
                log.info("features.deregistered", gateway_id=self.gateway_id())
            except (KazooException, TimeoutError) as exc:
                # The ephemeral node goes with the session anyway.
                log.warning("features.deregister_failed", error=repr(exc))
        self.loop = None  # late kazoo callbacks must not reach a closing loop
        try:
            await asyncio.wait_for(loop.run_in_executor(None, client.stop), timeout_s)
            await asyncio.wait_for(loop.run_in_executor(None, client.close), timeout_s)
        except TimeoutError:
            log.warning("features.zookeeper_close_timed_out", timeout_s=timeout_s)
        # Stopped once: an upgrade in place releases the registration before shutdown.
        self.client = None

    # -- kazoo's thread → the loop -----------------------------------------------------
    def _on_watch(self, finalized: Finalized | None, error: Exception | None) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        if error is not None:
            loop.call_soon_threadsafe(self._on_unreadable, error)
        elif finalized is not None:
            loop.call_soon_threadsafe(self._on_levels, finalized)

    def _on_state(self, state: str) -> None:
        loop = self.loop
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
                self.schedule_register()
                self._schedule_reread()
            elif self._register_on_reconnect:
                self._register_on_reconnect = False
                self.schedule_register()
        else:
            self._set_connected(False)
            if state == KazooState.LOST:
                self._session_lost = True
                self._registered = False

    def _set_connected(self, connected: bool) -> None:
        # Connected: confirmed now. Just disconnected: confirmed until now.
        if connected or self.connected:
            self._last_confirmed = time.monotonic()
        self.connected = connected
        self.metrics.zookeeper_connected.set(1 if connected else 0)

    def staleness_s(self) -> float:
        """Seconds the served levels have gone unconfirmed (0 while connected)."""
        if not self.enabled or self.connected:
            return 0.0
        return time.monotonic() - self._last_confirmed

    def _schedule_reread(self) -> None:
        if self.store is None or self.loop is None:
            return

        async def reread() -> None:
            try:
                finalized = await self.read()
            except KazooException as exc:
                log.warning("features.reread_failed", error=repr(exc))
                return
            self._on_levels(finalized)

        self.spawn(reread())

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        assert self.loop is not None
        task = self.loop.create_task(coro)
        self._tasks.add(task)  # held so it is not garbage-collected mid-flight
        task.add_done_callback(self._tasks.discard)

    # -- registration ------------------------------------------------------------------
    def gateway_id(self) -> str:
        return self._registration().gateway_id

    def schedule_register(self) -> None:
        """Register (again) in the background, when there is a session to do it in."""
        if self.store is None or self.loop is None or not self._may_register():
            return
        self.spawn(self._register())

    async def register_now(self) -> None:
        """Register at startup; raises GatewayIdTaken when another gateway holds the id."""
        if self.store is not None and self._may_register():
            await self._register(at_startup=True)

    async def _register(self, *, at_startup: bool = False) -> None:
        store = self.store
        assert store is not None and self.loop is not None
        registration = self._registration()
        try:
            await self.loop.run_in_executor(None, store.register, registration)
        except GatewayIdTaken as exc:
            if at_startup:
                raise
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
