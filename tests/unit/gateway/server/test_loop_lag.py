"""The event-loop lag monitor sees a callback that holds the loop, and tells it apart
from a loop that is not running at all (standing in for a process waiting for a CPU)."""

from __future__ import annotations

import asyncio
import time

import uvloop
from prometheus_client import CollectorRegistry

from gateway.observability.metrics import Metrics
from gateway.server.loop_lag import LoopLagMonitor


def _spin(seconds: float) -> None:
    """Hold the loop's thread on the CPU, as a large response decoded in one piece does
    (for that much CPU time: on a busy machine the wall time is longer)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _run(hold) -> tuple[LoopLagMonitor, Metrics]:  # type: ignore[no-untyped-def]
    metrics = Metrics(CollectorRegistry())
    monitor = LoopLagMonitor(metrics.event_loop_lag, metrics.event_loop_lag_busy, interval_s=0.01)

    async def main() -> None:
        monitor.start()
        await asyncio.sleep(0.05)  # a few probes on an idle loop
        hold(0.3)  # a callback that holds the loop well past the next probe
        await asyncio.sleep(0.05)
        monitor.stop()

    uvloop.run(main())  # the gateway's loop
    return monitor, metrics


def _above(metrics: Metrics, name: str, le: str) -> float:
    registry = metrics.registry
    count = registry.get_sample_value(f"{name}_count")
    assert count and count >= 3
    return count - registry.get_sample_value(f"{name}_bucket", {"le": le})  # type: ignore[operator]


def test_a_callback_holding_the_loop_shows_as_lag_and_as_busy() -> None:
    monitor, metrics = _run(_spin)
    # The probe posted during the 300 ms spin waited for most of it: above every
    # bucket but the last two, whatever the machine's speed; the loop's thread was
    # running all that while.
    assert _above(metrics, "kafka_gateway_event_loop_lag_seconds", "0.1") >= 1
    assert _above(metrics, "kafka_gateway_event_loop_lag_busy_seconds", "0.1") >= 1
    assert monitor.longest_s > 0.2
    assert monitor.longest_busy_s > 0.1


def test_a_loop_that_does_not_run_shows_as_lag_but_not_as_busy() -> None:
    # time.sleep() keeps the loop from running without using the CPU: what a process
    # that waits for a core looks like to the probe.
    monitor, metrics = _run(time.sleep)
    assert _above(metrics, "kafka_gateway_event_loop_lag_seconds", "0.1") >= 1
    assert monitor.longest_s > 0.2
    assert monitor.longest_busy_s < 0.1
    assert _above(metrics, "kafka_gateway_event_loop_lag_busy_seconds", "0.1") == 0
