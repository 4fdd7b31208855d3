"""Connection limits (issue 13): caps at accept, idle and first-request deadlines, and a
gateway-wide budget for buffered bytes, with Kafka's names (see Config).

Per process: with several worker processes (SO_REUSEPORT listeners) each worker holds
its own ``ConnectionLimits``; ``share(workers)`` divides the gateway-wide totals so
the workers together stay within the configured ones. Enforcing them exactly across
workers (a shared counter) is not done here.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from ..config import Config, parse_ip_overrides
from ..observability.logging import RateLimitedLogger
from ..observability.metrics import Metrics

limited = RateLimitedLogger("gateway.limits")


class Limited(Protocol):
    """What the sweep needs of a client connection (ClientConnection)."""

    peer_ip: str
    opened_at: float
    charged: int

    def activity(self) -> tuple[int, ...]: ...
    def has_request(self) -> bool: ...
    def buffered(self) -> int: ...
    def limit_close(self, reason: str) -> None: ...
    def memory_pause(self, paused: bool) -> None: ...


class ConnectionLimits:
    def __init__(
        self, config: Config, metrics: Metrics, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.metrics = metrics
        self.clock = clock
        self.idle_s = config.connections_max_idle_ms / 1000
        self.first_request_s = config.connection_first_request_timeout_ms / 1000
        self.max_connections = config.max_connections
        self.max_per_ip = config.max_connections_per_ip
        self.per_ip_overrides = parse_ip_overrides(config.max_connections_per_ip_overrides)
        self.rate = float(config.max_connection_creation_rate)
        self.budget = config.queued_max_request_bytes if config.queued_max_request_bytes > 0 else 0
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self._tokens = self.rate
        self._refilled = clock()
        self.queued = 0
        self._paused: set[Limited] = set()
        # activity signature and the time it was first seen, per connection
        self._seen: dict[Limited, tuple[tuple[int, ...], float]] = {}

    def share(self, workers: int) -> None:
        """Take 1/workers of every gateway-wide limit (per-IP caps included: a client's
        connections spread over the workers' SO_REUSEPORT listeners)."""
        if workers <= 1:
            return

        def part(n: int) -> int:
            return max(1, math.ceil(n / workers))

        self.max_connections = part(self.max_connections)
        self.max_per_ip = part(self.max_per_ip)
        self.per_ip_overrides = {ip: part(n) for ip, n in self.per_ip_overrides.items()}
        self.rate = max(1.0, self.rate / workers)
        self._tokens = min(self._tokens, self.rate)
        if self.budget:
            self.budget = part(self.budget)

    # -- at accept ------------------------------------------------------------------
    def admit(self, ip: str) -> str | None:
        """Count a new connection in; the limit it is over (then not counted), or None."""
        reason = self._over(ip)
        if reason is not None:
            self.metrics.connections_refused.labels(reason).inc()
            limited.warning("connection.refused", limit_key=reason, reason=reason, peer_ip=ip)
            return reason
        self.total += 1
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        return None

    def _over(self, ip: str) -> str | None:
        if self.total >= self.max_connections:
            return "max_connections"
        if self.per_ip.get(ip, 0) >= self.per_ip_overrides.get(ip, self.max_per_ip):
            return "max_connections_per_ip"
        # Token bucket: ``rate`` tokens a second, at most ``rate`` saved up.
        now = self.clock()
        self._tokens = min(self.rate, self._tokens + (now - self._refilled) * self.rate)
        self._refilled = now
        if self._tokens < 1:
            return "max_connection_creation_rate"
        self._tokens -= 1
        return None

    def release(self, conn: Limited) -> None:
        ip = conn.peer_ip
        self.total -= 1
        left = self.per_ip.get(ip, 1) - 1
        if left:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)
        self._seen.pop(conn, None)
        self._paused.discard(conn)

    # -- memory -------------------------------------------------------------------------
    def charge(self, conn: Limited, before: int, now: int) -> None:
        """``conn`` holds ``now`` buffered bytes instead of ``before``; stop reading it
        when the gateway is over budget and it holds some (those not holding any, e.g.
        a client with whole small requests, keep being served)."""
        self.queued += now - before
        if now == 0 and conn in self._paused:
            # It holds nothing any more (e.g. bytes held until the broker answered
            # ApiVersions were replayed): it may read again.
            self._paused.discard(conn)
            conn.memory_pause(False)
            return
        if self.budget and self.queued > self.budget and now > 0 and conn not in self._paused:
            self._paused.add(conn)
            conn.memory_pause(True)
            self.metrics.reads_paused.inc()
            limited.warning(
                "connection.reading_paused",
                reason="queued_max_request_bytes",
                queued_bytes=self.queued,
                budget=self.budget,
                connection_bytes=now,
                peer_ip=conn.peer_ip,
            )

    # -- the sweep ------------------------------------------------------------------------
    def sweep(self, connections: Iterable[Limited]) -> None:
        """Close idle and first-request-late connections; resume reading under budget."""
        now = self.clock()
        self.metrics.queued_bytes.set(self.queued)
        for conn in list(connections):
            if now - conn.opened_at >= self.first_request_s and not conn.has_request():
                self._close(conn, "first_request_timeout", now - conn.opened_at)
                continue
            signature = conn.activity()
            seen = self._seen.get(conn)
            if seen is None or seen[0] != signature:
                self._seen[conn] = (signature, now)
            elif signature[-1] == 0 and now - seen[1] >= self.idle_s:
                self._close(conn, "idle", now - seen[1])
        if self._paused and (not self.budget or self.queued <= self.budget):
            for conn in list(self._paused):
                self._paused.discard(conn)
                conn.memory_pause(False)

    def _close(self, conn: Limited, reason: str, after_s: float) -> None:
        self.metrics.connections_limit_closed.labels(reason).inc()
        limited.info(
            "connection.closed_by_limit",
            limit_key=reason,
            reason=reason,
            after_s=round(after_s, 3),
            peer_ip=conn.peer_ip,
        )
        self._seen.pop(conn, None)
        conn.limit_close(reason)

    def sweep_interval_s(self) -> float:
        # A quarter of the shortest deadline: closes happen at most 25 % late.
        return min(1.0, max(0.02, min(self.idle_s, self.first_request_s) / 4))

    async def run(self, connections: Callable[[], Iterable[Limited]]) -> None:
        interval = self.sweep_interval_s()
        while True:
            await asyncio.sleep(interval)
            self.sweep(connections())
