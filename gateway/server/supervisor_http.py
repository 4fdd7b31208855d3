"""The supervisor's operator endpoint (``metrics_listen``): /metrics merged from the
workers' own (``observability.merge``), /connections concatenated, /clients merged by
identity (``client_records.merge_snapshots``), /healthz and /readyz.

Each worker serves its endpoint on a private loopback port; the supervisor reads them
when scraped, and every ``REFRESH_S`` besides. ``Supervisor`` takes this role from
``OperatorEndpoint``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from ..client_records import merge_snapshots
from ..observability.merge import MetricsMerger, parse
from ..observability.metrics import Metrics
from .app import Gateway
from .http import Route, check_route
from .workers import Slot

# The supervisor reads the workers' metrics this often even without a scrape, so a
# worker that dies loses at most this long of counts from the sums.
REFRESH_S = 5.0
# The supervisor's own series in /metrics (the rest comes from the workers). A SIGHUP
# reaches every worker, but it is one reload of the gateway: the supervisor's own control
# plane loads the same files first, and its count is the one shown.
OWN_FAMILIES = frozenset({"kafka_gateway_worker_restarts", "kafka_gateway_config_reloads"})


class OperatorEndpoint:
    """The operator endpoint role of ``Supervisor``."""

    # Of the supervisor that takes this role.
    control: Gateway
    metrics: Metrics
    merger: MetricsMerger
    slots: list[Slot]
    started: bool
    stopping: bool

    def routes(self) -> dict[str, Route]:
        return {
            "/metrics": self._metrics_route,
            "/connections": self._connections_route,
            "/clients": self._clients_route,
            "/healthz": check_route(self.health),
            "/readyz": check_route(self.readiness),
        }

    def health(self) -> tuple[bool, str]:
        ok, why = self.control.health()
        if ok and self.started and not any(s.ready for s in self.slots):
            return False, "no worker is serving"
        return ok, why

    def readiness(self) -> tuple[bool, str]:
        ready = sum(s.ready and s.alive for s in self.slots)
        if not self.started:
            return False, "starting"
        if self.stopping:
            return False, "draining"
        if not self.control.features.compatible:
            return False, "not accepting connections: incompatible finalized feature levels"
        if not ready:
            return False, "no worker is serving"
        ok, why = self.control.probes.readiness()
        if not ok:
            return False, why
        return True, f"ready ({ready}/{len(self.slots)} workers)"

    async def _metrics_route(self) -> tuple[int, str, bytes]:
        await self._read_worker_metrics()
        own = {
            name: family
            for name, family in parse(generate_latest(self.metrics.registry).decode()).items()
            if name in OWN_FAMILIES
        }
        merged = self.merger.merge([s.last_metrics for s in self.slots] + [own])
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Fixed(merged))
        return 200, CONTENT_TYPE_LATEST, generate_latest(registry)

    async def _read_worker_metrics(self) -> None:
        async def read(slot: Slot) -> None:
            body = await _get(slot, "/metrics")
            if body is not None:
                parsed = parse(body.decode())
                slot.last_metrics = {n: f for n, f in parsed.items() if n not in OWN_FAMILIES}

        await asyncio.gather(*(read(s) for s in self.slots))

    async def _refresh_metrics(self) -> None:
        while not self.stopping:
            await asyncio.sleep(REFRESH_S)
            await self._read_worker_metrics()

    async def _connections_route(self) -> tuple[int, str, bytes]:
        async def read(slot: Slot) -> list[dict[str, Any]]:
            body = await _get(slot, "/connections")
            if body is None:
                return []
            entries: list[dict[str, Any]] = json.loads(body)
            pid = slot.process.pid if slot.process is not None else None
            for entry in entries:
                entry["worker"] = slot.index
                entry["worker_pid"] = pid
            return entries

        parts = await asyncio.gather(*(read(s) for s in self.slots))
        every = [entry for part in parts for entry in part]
        return 200, "application/json", json.dumps(every, indent=1).encode() + b"\n"

    async def _clients_route(self) -> tuple[int, str, bytes]:
        async def read(slot: Slot) -> list[dict[str, Any]]:
            body = await _get(slot, "/clients")
            return [] if body is None else json.loads(body)

        parts = await asyncio.gather(*(read(s) for s in self.slots))
        # Marked once merged: what an identity used is the sum over the workers.
        merged = self.control.release_watch.mark(merge_snapshots(parts))
        return 200, "application/json", json.dumps(merged, indent=1).encode() + b"\n"


class _Fixed(Collector):
    """Hands generate_latest the merged families."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> list[Metric]:
        return self.metrics


async def _get(slot: Slot, path: str, timeout_s: float = 5.0) -> bytes | None:
    """GET a worker's private endpoint; None when it does not answer (dying, busy)."""
    if not (slot.ready and slot.alive and slot.http_port):
        return None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection("127.0.0.1", slot.http_port)
            try:
                writer.write(f"GET {path} HTTP/1.1\r\nHost: worker\r\n\r\n".encode())
                raw = await reader.read()
            finally:
                writer.close()
    except (OSError, TimeoutError):
        return None
    head, _, body = raw.partition(b"\r\n\r\n")
    return body if head.startswith(b"HTTP/1.1 200") else None
