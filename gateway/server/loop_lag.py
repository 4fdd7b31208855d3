"""Event-loop lag: how late a periodic timer fires.

Every connection of a gateway process shares one event loop, so a callback that holds
it (a large response copied or decoded in one piece) delays every other client. A
timer due every ``INTERVAL_S`` measures its own lateness and observes it into a
histogram; cheap (one callback per interval), and it sees every stall longer than the
interval's remainder, whatever caused it.
"""

from __future__ import annotations

import asyncio

from prometheus_client import Histogram

# Ten samples a second: enough for a p99 over a scrape interval, negligible cost.
INTERVAL_S = 0.1


class LoopLagMonitor:
    """Observes into ``histogram`` how late each tick runs; ``start``/``stop`` on the loop."""

    def __init__(self, histogram: Histogram, interval_s: float = INTERVAL_S) -> None:
        self._histogram = histogram
        self._interval = interval_s
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        # The longest lag seen since start, for benchmarks and the log at shutdown.
        self.longest_s = 0.0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._due = loop.time() + self._interval
        self._handle = loop.call_at(self._due, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        lag = max(now - self._due, 0.0)
        self._histogram.observe(lag)
        if lag > self.longest_s:
            self.longest_s = lag
        self._due = now + self._interval
        self._handle = loop.call_at(self._due, self._tick, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
