"""The gateway process: listeners, the connection set, feature gating, health, signals
and graceful shutdown.

Start-up order: ask the upstream ApiVersions (so the gateway knows what it supports),
connect to ZooKeeper and read the finalized feature levels (refusing to start if they
exceed that support), open the listeners, serve /metrics and the health endpoints,
register in ZooKeeper. Shutdown runs it backwards: readiness flips first, listeners
close, in-flight requests drain, the registration is removed.
"""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import signal
import time
from collections.abc import Coroutine
from typing import Any

from .. import __version__
from ..client_info import ClientInfo
from ..clients import ConnectionRegistry
from ..config import Config, HostPort
from ..features.znode import Registration
from ..interceptors import dispatch
from ..interceptors.api_versions import SoftwareTags
from ..observability.logging import RequestLog, get_logger
from ..observability.metrics import Metrics
from ..observability.release_watch import ReleaseWatch
from ..tls import client_side_context, upstream_context, upstream_server_hostname
from .connection_book import ConnectionBook
from .features import FeatureGate
from .handover_workers import answer_supervisor
from .http import check_route, json_route, metrics_route, serve_http
from .limit_counts import SharedCounts
from .limits import ConnectionLimits
from .listeners import Listeners
from .loop_lag import LoopLagMonitor
from .negotiation import Negotiation
from .proxy import ClientConnection
from .reload import reload_in_place
from .routing import ClusterRouter, SidecarRouter
from .sni import SniRouter
from .upstream_probes import UpstreamProbes
from .upstream_recheck import UpstreamRecheck
from .withdrawn import renegotiate_all
from .worker_role import WorkerRole

log = get_logger("gateway.server")


class Gateway(Negotiation, Listeners):
    """One gateway process (or one worker of a supervisor): its roles are negotiation
    (``negotiation``), listeners (``listeners``), and here start-up, health, feature
    gating and shutdown. Parts it holds: the connection records (``connection_book``),
    the upstream probes (``upstream_probes``); SIGHUP's rule is ``reload``'s."""

    def __init__(
        self, config: Config, metrics: Metrics | None = None, worker: WorkerRole | None = None
    ) -> None:
        assert config.upstream is not None, "the embedded stack sets upstream before start"
        self.config = config
        # None: a gateway of its own (one process); else one worker of a supervisor.
        self.worker = worker
        self.metrics = metrics or Metrics()
        self.metrics.max_software_labels = config.max_client_software_labels
        # The next Kafka release, watched from the traffic counters at scrape time.
        self.release_watch = ReleaseWatch(config.upgrade_target_release, self.metrics.traffic)
        self.metrics.registry.register(self.release_watch)
        self.router: SidecarRouter | ClusterRouter
        if config.mode == "cluster":
            self.router = ClusterRouter(config, self._on_new_broker)
        else:
            self.router = SidecarRouter(config)
        self.connections: set[ClientConnection] = set()
        self.registry = ConnectionRegistry()
        self.software_tags = SoftwareTags(
            config.broker_software_name_tag, config.broker_software_version_tag
        )
        self._init_negotiation()
        self._init_listeners()
        self._stopping: asyncio.Event | None = None
        self._http: asyncio.Server | None = None
        self._background: set[asyncio.Task[None]] = set()
        counts = None
        if worker is not None and worker.limits_path is not None:
            # One of several workers: the caps and the creation rate are counted in the
            # supervisor's shared table, so they hold for the whole gateway.
            rate = float(config.max_connection_creation_rate)
            counts = SharedCounts(worker.limits_path, worker.index, rate)
        self.limits = ConnectionLimits(config, self.metrics, counts=counts)
        if worker is not None:
            self.limits.share_budget(worker.count)
        self.book = ConnectionBook(self.connections, self.registry, self.metrics, self.limits)
        self._limits_task: asyncio.Task[None] | None = None
        port = config.advertised_listen_port
        self.gateway_id = config.gateway_id or f"{config.advertised}:{port}"
        self.features = FeatureGate(config, self.metrics, self._features_changed, self.registration)
        if worker is not None:
            self.features.registers = False
            self.features.refuse_at_startup = False
        self.metrics.traffic.refresh = self.book.fold
        self.started = False
        # Set once every listener (clients, metrics) is bound and serving: the command
        # line prints its "is up" banner then, not before (gateway.cli).
        self.serving = asyncio.Event()
        # Event-loop lag (kafka_gateway_event_loop_lag_seconds), measured from start().
        self.loop_lag = LoopLagMonitor(
            self.metrics.event_loop_lag, self.metrics.event_loop_lag_busy
        )
        self.stopping = False
        self.request_log = (
            RequestLog(config.log_requests, config.log_request_level)
            if config.log_requests > 0
            else None
        )
        self._update_allowed = [
            ipaddress.ip_network(cidr, strict=False) for cidr in config.features_update_allowed_from
        ]
        # Built once and shared: by every listener, and by every upstream connection
        # including the start-up probe (None: plaintext on that side).
        self.client_tls = client_side_context(config)
        self.upstream_tls = upstream_context(config)
        # The start-up probe of the upstream, and /readyz's check of it.
        self.probes = UpstreamProbes(
            config,
            self.metrics,
            self.upstream_tls,
            learn=self.advertised_ranges,
            observe=self.features.observe_broker,
            spawn=self._spawn,
        )
        # [sni]: the one TLS listener routes each connection by its server name.
        self.sni: SniRouter | None = None
        if config.sni_broker_host is not None and isinstance(self.router, ClusterRouter):
            assert self.client_tls is not None  # the config requires [tls] with [sni]
            self.sni = SniRouter(config, self.router, self.metrics, self.upstream_tls)
            self.sni.install(self.client_tls)

    def upstream_server_hostname(self, address: HostPort) -> str | None:
        return upstream_server_hostname(self.config, address)

    # -- start-up and health ---------------------------------------------------------
    async def start(self) -> None:
        """Raises FeatureStartupError (refuse to start) or OSError (cannot listen)."""
        self._stopping = asyncio.Event()
        upstream = self.config.upstream
        assert upstream is not None
        await self.start_control_plane()
        dispatch.warm_up()  # before the first client, not during its first response
        # What is loaded by now lives as long as the process: out of the collector's
        # sight (as in the workers' fork server), a full collection no longer walks the
        # ~70k objects of the imports and schemas (18 ms that held the loop each time).
        gc.freeze()
        name = "bootstrap" if self.config.mode == "cluster" else "sidecar"
        name = "sni" if self.sni is not None else name
        await self._listen(name, self.config.listen, upstream)
        handover = self.worker.handover if self.worker is not None else None
        if handover is not None:
            # Upgrade in place: serve the old worker's broker ports from the start, as it
            # did (this worker learns of the brokers only from its own Metadata).
            for broker, address, target in handover.brokers():
                await self._listen(broker, address, target)
            handover.close_unused()
        metrics_listen = self.config.metrics_listen
        if metrics_listen is not None:
            # A worker serves its own endpoint privately; the supervisor serves
            # metrics_listen, summing the workers' /metrics.
            host, port = (
                ("127.0.0.1", 0) if self.worker else (metrics_listen.host, metrics_listen.port)
            )
            self._http = await serve_http(
                host,
                port,
                {
                    "/metrics": metrics_route(self.metrics.registry),
                    "/healthz": check_route(self.health),
                    "/readyz": check_route(self.readiness),
                    "/connections": json_route(self.book.snapshot),
                    "/clients": json_route(self.clients_snapshot),
                },
            )
        await self.features.register_now()
        self.loop_lag.start()
        self._limits_task = asyncio.get_running_loop().create_task(
            self.limits.run(lambda: [conn.budget for conn in self.connections])
        )
        self.started = True
        self.serving.set()
        self._update_health()
        check_ms = self.config.upstream_api_versions_check_ms
        if check_ms:
            recheck = UpstreamRecheck(self, lambda: self.connections, check_ms / 1000)
            self._spawn(recheck.run())
        if self.worker is None:
            self.probes.watch_upstream()
        else:
            http_port = self._http.sockets[0].getsockname()[1] if self._http else None
            self.worker.ready(http_port)
            self._spawn(self._watch_supervisor(self.worker))
            if handover is not None:
                self._spawn(
                    answer_supervisor(self.worker.index, self.listening_sockets, handover.channel)
                )

    async def start_control_plane(self) -> None:
        """Learn the upstream's versions and the finalized levels (FeatureStartupError:
        refuse to start). A supervisor runs only this, then registers."""
        upstream = self.config.upstream
        assert upstream is not None
        await self.probes.at_startup(upstream)
        await self.features.start()

    async def _watch_supervisor(self, worker: WorkerRole) -> None:
        while not self.stopping:
            if worker.orphaned():
                log.error("worker.supervisor_gone", worker=worker.index, action="stopping")
                self.request_stop("supervisor gone")
                return
            await asyncio.sleep(1.0)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def health(self) -> tuple[bool, str]:
        if not self.features.compatible:
            return False, "finalized feature levels exceed what this gateway supports"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        if not self.started:
            return False, "starting"
        if self.stopping:
            return False, "draining"
        if not self.features.compatible:
            return False, "not accepting connections: incompatible finalized feature levels"
        ok, why = self.probes.readiness()
        if not ok:
            return False, why
        return True, "ready"

    # -- feature gating --------------------------------------------------------------
    def registration(self) -> Registration:
        cfg = self.config
        upstream = cfg.upstream
        assert upstream is not None
        software = self.broker_software(upstream)
        metrics_url = None
        if cfg.metrics_listen is not None:
            host = cfg.metrics_listen.host
            if host in ("0.0.0.0", "::"):
                host = cfg.advertised
            metrics_url = f"http://{HostPort(host, cfg.metrics_listen.port)}/metrics"
        return Registration(
            gateway_id=self.gateway_id,
            listener=str(HostPort(cfg.advertised, cfg.advertised_listen_port)),
            upstream=str(upstream),
            features=dict(self.features.supported or {}),
            metrics_url=metrics_url,
            broker_software_name=software.name,
            broker_software_version=software.version,
            gateway_version=__version__,
            timestamp_ms=int(time.time() * 1000),
            broker_finalized=self.features.brokers.finalized(),
        )

    def _features_changed(self) -> None:
        """Finalized levels or compatibility changed: re-cap every connection, and drain
        those that lost a version, so their clients renegotiate (``withdrawn``)."""
        self._forget_negotiated()
        renegotiate_all(self, self.connections)
        self._update_health()

    def update_features_allowed(self, peer: str) -> bool:
        """Whether a client at ``peer`` ("host:port") may change finalized features."""
        host = peer.rpartition(":")[0].strip("[]")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self._update_allowed)

    # -- connections -----------------------------------------------------------------
    def connection_opened(self, conn: ClientConnection) -> ClientInfo:
        return self.book.opened(conn, stopping=self.stopping)

    def connection_closed(self, conn: ClientConnection) -> None:
        self.book.closed(conn)

    # -- lifecycle -------------------------------------------------------------------
    async def serve_forever(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig.name)
        if self.worker is not None:
            # Ctrl-C reaches the whole process group; the supervisor alone decides, and
            # stops its workers with SIGTERM (else a worker's exit could race the
            # supervisor's own SIGINT and look like a crash to restart).
            loop.remove_signal_handler(signal.SIGINT)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        try:
            await self.start()
        except BaseException:
            await self.features.stop()
            # A listener that did bind is closed now, not at exit: the command line
            # checks which configured port is taken to name it (gateway.server.ports).
            for server in self._servers.values():
                server.close()
            if self._http is not None:
                self._http.close()
            raise
        assert self._stopping is not None
        await self._stopping.wait()
        await self.shutdown()

    def reload(self) -> None:
        """SIGHUP: re-read the TLS certificate files, the feature catalogue, the target
        release and the bridge policy (``reload``); connections stay up."""
        reload_in_place(
            self.config, self.metrics, self.client_tls, self.features, self.release_watch
        )

    def clients_snapshot(self) -> list[dict[str, Any]]:
        """/clients: the identities, marked with what upgrade_target_release refuses."""
        return self.release_watch.mark(self.registry.identities_snapshot())

    def request_stop(self, why: str = "stop") -> None:
        log.info("gateway.stopping", signal=why)
        if self._stopping is not None:
            self._stopping.set()

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish, close what is left, deregister."""
        self.stopping = True  # readiness flips first
        for server in self._servers.values():
            server.close()
        await self.book.drain(self.config.drain_timeout_s)
        await self.features.stop()
        self.loop_lag.stop()
        if self._limits_task is not None:
            self._limits_task.cancel()
        if self._http is not None:
            self._http.close()
        log.info(
            "gateway.stopped",
            unfinished_connections=len(self.connections),
            longest_loop_lag_ms=round(self.loop_lag.longest_s * 1000, 3),
            longest_loop_lag_busy_ms=round(self.loop_lag.longest_busy_s * 1000, 3),
        )
