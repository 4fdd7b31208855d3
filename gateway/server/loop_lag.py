"""Event-loop lag: how long a callback that became ready waits for the loop to run it.

Every connection of a gateway process shares one event loop, so a callback that holds
it (a large response copied or decoded in one piece) delays every other client. A
small thread posts a probe to the loop every ``INTERVAL_S`` (``call_soon_threadsafe``
wakes the loop through the same poll that a socket's readiness does) and the probe
measures, with ``perf_counter``, how long it waited: about what the next client's bytes
would have waited.

A timer scheduled on the loop itself measured this before; libuv's timers and clock
count whole milliseconds, so it could not tell 0.1 ms from 1.9 ms against a 1 ms
target. The thread also reads the loop thread's own CPU clock when it posts the probe:
of the wait, the part the loop thread spent *running* (callbacks that held it) is
told apart from the part it spent waiting for a CPU (a busy machine, a CPU quota), two
causes with different cures. Both go into histograms; the cost is one thread wake-up
and two clock reads per interval.
"""

from __future__ import annotations

import asyncio
import threading
import time
from time import perf_counter

from prometheus_client import Histogram

# Ten samples a second: enough for a p99 over a scrape interval, negligible cost.
INTERVAL_S = 0.1


class LoopLagMonitor:
    """Observes into ``lag`` how long each probe waited for the loop, and into ``busy``
    the part of that wait the loop's thread was running; ``start``/``stop`` on the loop."""

    def __init__(
        self, lag: Histogram, busy: Histogram | None = None, interval_s: float = INTERVAL_S
    ) -> None:
        self._lag = lag
        self._busy = busy
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The longest waits seen since start, for benchmarks and the log at shutdown.
        self.longest_s = 0.0
        self.longest_busy_s = 0.0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        # The loop thread's CPU clock, read from the probing thread.
        clock = time.pthread_getcpuclockid(threading.get_ident())
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(loop, clock), name="loop-lag", daemon=True
        )
        self._thread.start()

    def _run(self, loop: asyncio.AbstractEventLoop, clock: int) -> None:
        while not self._stop.wait(self._interval):
            try:
                loop.call_soon_threadsafe(self._probe, perf_counter(), time.clock_gettime(clock))
            except RuntimeError:  # the loop closed under us
                return

    def _probe(self, posted: float, cpu_posted: float) -> None:
        waited = perf_counter() - posted
        # The loop thread's CPU time since the probe was posted, on its own clock.
        busy = min(max(time.thread_time() - cpu_posted, 0.0), waited)
        self._lag.observe(waited)
        if self._busy is not None:
            self._busy.observe(busy)
        if waited > self.longest_s:
            self.longest_s = waited
        if busy > self.longest_busy_s:
            self.longest_busy_s = busy

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
