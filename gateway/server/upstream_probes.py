"""What the gateway asks its upstream on connections of its own, outside client traffic.

Two probes, both an ApiVersions request (``kafka_client.probe_api_versions``) with the
upstream TLS of the client connections:

* **At start-up**, before the first client: what the upstream offers is what the
  gateway supports, so the feature gate can check the finalized levels and register
  with it. A broker that is down then is not fatal: the first client connection learns
  the same (and a supervisor probes again until it knows).
* **Every readiness_upstream_check_ms**, for ``/readyz`` (``upstream_watch``), in the
  process that serves ``/readyz`` (a single gateway or a supervisor): its answers also
  keep the brokers' finalized levels current there, since a supervisor learns nothing
  from client connections (its workers do).

Apart from ``Gateway`` because neither touches a client connection: they need only the
config, the upstream TLS and where to hand what they learned.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from ..config import Config, HostPort
from ..features.report import FeatureReport
from ..kafka_client import probe_api_versions
from ..observability.logging import get_logger
from ..observability.metrics import Metrics
from ..tls import upstream_server_hostname
from ..versions import VersionRange
from .upstream_watch import UpstreamWatch

log = get_logger("gateway.server")


class Learn(Protocol):
    """Where an upstream's answer goes (``Negotiation.advertised_ranges``)."""

    def __call__(
        self,
        address: HostPort,
        upstream: dict[int, VersionRange],
        *,
        upstream_features: FeatureReport,
    ) -> object: ...


class UpstreamProbes:
    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        tls: ssl.SSLContext | None,
        *,
        learn: Learn,
        observe: Callable[[str, FeatureReport], None],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.tls = tls  # None: plaintext towards the upstream
        self._learn = learn
        self._observe = observe  # the feature gate's observe_broker
        self._spawn = spawn
        # /readyz's check of the upstream, in the process that serves /readyz only.
        self.watch: UpstreamWatch | None = None

    async def at_startup(self, upstream: HostPort) -> None:
        """Learn the upstream's ApiVersions before clients come (feature support, the
        startup check, the registration). A broker that is down now is not fatal: the
        first client connection will learn the same."""
        try:
            ranges, features = await asyncio.wait_for(
                probe_api_versions(
                    upstream.host,
                    upstream.port,
                    self.tls,
                    upstream_server_hostname(self.config, upstream),
                ),
                self.config.upstream_connect_timeout_s,
            )
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
            self.metrics.upstream_connect_errors.labels(str(upstream)).inc()
            log.warning(
                "upstream.probe_failed",
                upstream=str(upstream),
                error=str(exc) or type(exc).__name__,
                consequence="feature support is learned from the first client connection",
            )
            return
        self._learn(upstream, ranges, upstream_features=features)

    def watch_upstream(self) -> None:
        """Check the upstream for /readyz every readiness_upstream_check_ms (a single
        gateway, or a supervisor's control plane; not the workers)."""
        upstream, interval_ms = self.config.upstream, self.config.readiness_upstream_check_ms
        if upstream is None or interval_ms == 0 or self.config.metrics_listen is None:
            return
        tls, hostname = self.tls, upstream_server_hostname(self.config, upstream)

        async def probe() -> None:
            _, features = await probe_api_versions(upstream.host, upstream.port, tls, hostname)
            # A supervisor learns nothing from client connections (its workers do): this
            # keeps its registration's and metric's broker levels current.
            self._observe(str(upstream), features)

        self.watch = UpstreamWatch(
            upstream,
            probe,
            interval_ms / 1000,
            self.config.upstream_connect_timeout_s,
            on_error=self.metrics.upstream_connect_errors.labels(str(upstream)).inc,
        )
        self._spawn(self.watch.run())

    def readiness(self) -> tuple[bool, str]:
        """/readyz's word on the upstream: (True, "") unless the watch's check fails."""
        return self.watch.readiness() if self.watch else (True, "")
