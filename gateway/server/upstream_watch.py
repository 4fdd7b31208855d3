"""Whether the upstream broker answers, for ``/readyz``.

Kafka's own readiness is its listeners: a broker that is up is ready. A gateway that is
up but whose broker is not is worse than down for its clients: they connect, send
ApiVersions and are closed, again and again, instead of being routed to another gateway.
So the process serving ``/readyz`` (a single gateway, or a supervisor) asks the upstream
ApiVersions every ``readiness_upstream_check_ms`` on a connection of its own, the way the
start-up probe does, and ``/readyz`` answers 503 with the reason while it fails.

The check is active, not read off client traffic: a gateway taken out of a Service by
its failing readiness gets no traffic from which to learn that the broker is back.
``/healthz`` (liveness) does not look at it: restarting the gateway does not bring a
broker back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from ..config import HostPort
from ..observability.logging import get_logger

log = get_logger("gateway.upstream_watch")


class UpstreamWatch:
    def __init__(
        self,
        upstream: HostPort,
        probe: Callable[[], Awaitable[object]],
        interval_s: float,
        timeout_s: float,
        on_error: Callable[[], None] = lambda: None,
    ) -> None:
        self.upstream = upstream
        self._probe = probe
        self.interval_s = interval_s
        self.timeout_s = min(timeout_s, interval_s)
        self._on_error = on_error
        # None until the first check: the start-up probe has had its say by then.
        self.reachable: bool | None = None
        self.error = ""
        self.since = time.monotonic()

    async def run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self.interval_s)

    async def check(self) -> bool:
        try:
            await asyncio.wait_for(self._probe(), self.timeout_s)
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
            self._on_error()
            self._set(False, str(exc) or type(exc).__name__)
            return False
        self._set(True, "")
        return True

    def readiness(self) -> tuple[bool, str]:
        """(False, why) while the last check failed; (True, "") otherwise."""
        if self.reachable is not False:
            return True, ""
        down_s = time.monotonic() - self.since
        return False, f"upstream {self.upstream} unreachable for {down_s:.0f} s: {self.error}"

    def _set(self, reachable: bool, error: str) -> None:
        if reachable == self.reachable:
            self.error = error
            return
        was_down_s = time.monotonic() - self.since
        if not reachable:
            log.warning(
                "upstream.unreachable",
                upstream=str(self.upstream),
                error=error,
                consequence="/readyz answers 503 until it answers again",
            )
        elif self.reachable is False:
            log.info("upstream.reachable", upstream=str(self.upstream), down_s=round(was_down_s, 1))
        self.reachable, self.error, self.since = reachable, error, time.monotonic()
