"""Connection limits (issue 13): caps at accept, the creation-rate throttle, idle and
first-request deadlines, and a gateway-wide budget for buffered bytes, with Kafka's
names (see Config).

The caps (``max_connections``, ``max_connections_per_ip`` and its overrides) and
``max_connection_creation_rate`` hold for the whole gateway: one process keeps its
counts in dicts, several workers share one table (``limit_counts``). The memory budget
(``queued_max_request_bytes``) is split: each worker pauses reading against its
1/workers part (``share_budget``), so the workers together never buffer more than the
configured budget. Sharing it exactly would mean a lock per read of every connection;
the split costs nothing and errs on the safe side (one worker may pause while another
has room).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from ..config import Config, parse_ip_overrides
from ..observability.logging import RateLimitedLogger
from ..observability.metrics import Metrics
from .limit_counts import NO_LIMIT, LocalCounts, SharedCounts

limited = RateLimitedLogger("gateway.limits")


class Limited(Protocol):
    """What the limits need of a client connection (its ``budget.Budget``)."""

    peer_ip: str
    opened_at: float
    charged: int
    # Counted in the caps (admit) and not yet released.
    counted: bool

    def activity(self) -> tuple[int, ...]: ...
    def has_request(self) -> bool: ...
    def buffered(self) -> int: ...
    def limit_close(self, reason: str) -> None: ...
    def memory_pause(self, paused: bool) -> None: ...


class ConnectionLimits:
    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        counts: LocalCounts | SharedCounts | None = None,
    ) -> None:
        self.metrics = metrics
        self.clock = clock
        self.idle_s = config.connections_max_idle_ms / 1000
        self.first_request_s = config.connection_first_request_timeout_ms / 1000
        self.max_connections = config.max_connections
        self.max_per_ip = config.max_connections_per_ip
        self.per_ip_overrides = parse_ip_overrides(config.max_connections_per_ip_overrides)
        self.rate = float(config.max_connection_creation_rate)
        # Per-address counts only matter with a per-IP cap (shared tables skip them).
        self.per_ip_capped = self.max_per_ip < NO_LIMIT or bool(self.per_ip_overrides)
        self.rate_capped = config.max_connection_creation_rate < NO_LIMIT
        # The longest a new connection is held for a creation-rate token before it is
        # closed instead: its first-request deadline, which it could not meet anyway.
        self.max_throttle_s = self.first_request_s
        self.budget = config.queued_max_request_bytes if config.queued_max_request_bytes > 0 else 0
        self.counts = counts if counts is not None else LocalCounts(self.rate)
        self.queued = 0
        self._paused: set[Limited] = set()
        # activity signature and the time it was first seen, per connection
        self._seen: dict[Limited, tuple[tuple[int, ...], float]] = {}

    def share_budget(self, workers: int) -> None:
        """One of ``workers`` workers: pause reading against 1/workers of the memory
        budget (the caps and the rate are shared exactly instead; see the docstring)."""
        if workers > 1 and self.budget:
            self.budget = max(1, self.budget // workers)

    # -- at accept ------------------------------------------------------------------
    def admit(self, conn: Limited) -> str | None:
        """Count a new connection in the caps; the cap it is over (then not counted,
        counted in the metric and logged), or None."""
        ip = conn.peer_ip
        cap = self.per_ip_overrides.get(ip, self.max_per_ip)
        reason = self.counts.admit(ip, self.max_connections, cap, self.per_ip_capped)
        if reason is not None:
            self._refused(reason, ip)
            return reason
        conn.counted = True
        return None

    def accept(self, conn: Limited) -> float | None:
        """A new connection: how long to hold it before serving it (0: at once), or None
        when it is over a cap or the creation rate for longer than it may wait (close it
        at accept, as Kafka's acceptor does)."""
        if self.admit(conn) is not None:
            return None
        return self.creation_delay(conn)

    def creation_delay(self, conn: Limited) -> float | None:
        """How long to hold an admitted connection before serving it, as Kafka's
        acceptor throttles over max.connection.creation.rate; None: the wait would
        exceed max_throttle_s, so it is refused (released here; close it)."""
        if not self.rate_capped:
            return 0.0
        wait = self.counts.reserve(self.max_throttle_s)
        if wait is None:
            self._refused("max_connection_creation_rate", conn.peer_ip)
            self.release(conn)
            return None
        if wait > 0:
            self.metrics.connections_throttled.inc()
            limited.info(
                "connection.throttled",
                limit_key="max_connection_creation_rate",
                reason="max_connection_creation_rate",
                wait_s=round(wait, 3),
                peer_ip=conn.peer_ip,
            )
        return wait

    def _refused(self, reason: str, ip: str) -> None:
        self.metrics.connections_refused.labels(reason).inc()
        limited.warning("connection.refused", limit_key=reason, reason=reason, peer_ip=ip)

    def release(self, conn: Limited) -> None:
        """Uncount a closed connection (once, whichever path closes it)."""
        if conn.counted:
            conn.counted = False
            self.counts.release(conn.peer_ip)
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
