"""The gateway's live client connections: what opening and closing one records, and
draining them all at shutdown.

A connection that opens is added to the gateway's set, registered for ``/connections``
(``clients.ConnectionRegistry``) and counted in the connection metrics; one that closes
gives back what the limits charged it, folds its last counts into the metrics, ends a
SASL login it left half done, and leaves the registry and the metrics. Shutdown drains
every connection (each finishes its in-flight requests), waits up to drain_timeout_s,
then aborts what is left.

Apart from ``Gateway`` because it is the one place these records are kept in step; the
gateway decides when (a connection accepted as the listeners close is drained at once),
this module what each event does to them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..client_info import ClientInfo
from ..clients import ConnectionRegistry
from ..observability.metrics import Metrics
from .limits import ConnectionLimits
from .proxy import ClientConnection


class ConnectionBook:
    def __init__(
        self,
        live: set[ClientConnection],
        registry: ConnectionRegistry,
        metrics: Metrics,
        limits: ConnectionLimits,
    ) -> None:
        self.live = live  # the gateway's own set, which its other parts iterate
        self.registry = registry
        self.metrics = metrics
        self.limits = limits

    def opened(self, conn: ClientConnection, *, stopping: bool) -> ClientInfo:
        self.live.add(conn)
        info = self.registry.add(conn.peer, conn.listener, principal=conn.principal)
        self.metrics.connections_total.labels(conn.listener).inc()
        self.metrics.connections_active.labels(conn.listener, *info.labels).inc()
        if stopping:
            # Accepted as the listeners closed, after shutdown drained the others: closed
            # as they were, not left open until drain_timeout_s.
            conn.drain()
        return info

    def closed(self, conn: ClientConnection) -> None:
        if conn in self.live:
            self.live.discard(conn)
            self.limits.charge(conn.budget, conn.budget.charged, 0)
            conn.traffic.fold()
            login = conn.inflight.sasl.login
            if login is not None:
                # Closed mid-login (Kafka closes on a failed v0 login): said, no principal.
                login.abandon()
            if conn.info is not None:
                self.metrics.connections_active.labels(conn.listener, *conn.info.labels).dec()
                if conn.info.bridged:
                    self.metrics.bridge.connections.dec()
                self.registry.remove(conn.info.connection_id)
        # Also a connection closed before it was served (held by the throttle).
        self.limits.release(conn.budget)

    def snapshot(self) -> list[dict[str, Any]]:
        """/connections: the registry, each connection's counts brought up to date."""
        for conn in self.live:
            conn.traffic.sync()
        return self.registry.snapshot()

    def fold(self) -> None:
        """Every live connection's counts into the metrics (before a scrape)."""
        for conn in list(self.live):
            conn.traffic.fold()

    async def drain(self, timeout_s: float) -> None:
        """Let in-flight requests finish for up to ``timeout_s``; abort what is left."""
        for conn in list(self.live):
            conn.drain()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.live and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.live):
            conn.abort()
