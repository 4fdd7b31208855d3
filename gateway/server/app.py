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
import socket
import ssl
import struct
import time
from collections.abc import Coroutine
from typing import Any

from .. import __version__
from ..clients import ClientInfo, ConnectionRegistry
from ..config import Config, HostPort
from ..features.catalogue import CatalogueError
from ..features.report import NO_FEATURES, FeatureReport, merge_reports
from ..features.znode import Registration
from ..interceptors import dispatch
from ..interceptors import upstream as internal
from ..interceptors.api_versions import SoftwareTags
from ..observability.logging import RateLimitedLogger, RequestLog, get_logger
from ..observability.metrics import Metrics
from ..protocol import DESCRIBE_CLUSTER
from ..versions import (
    ApiVersionsError,
    BrokerSoftware,
    VersionRange,
    fingerprint,
    gateway_supported,
    negotiate,
    parse_upstream_api_versions,
)
from .features import FeatureGate
from .handover_workers import answer_supervisor
from .http import check_route, json_route, metrics_route, serve_http
from .limit_counts import SharedCounts
from .limits import ConnectionLimits
from .loop_lag import LoopLagMonitor
from .proxy import ClientConnection, PlainTable
from .routing import ClusterRouter, SidecarRouter
from .services import Negotiated
from .sni import SniRouter
from .tls import (
    TlsSetupError,
    client_side_context,
    reload_client_chain,
    upstream_context,
    upstream_server_hostname,
)
from .upstream_watch import UpstreamWatch
from .worker_role import WorkerRole

log = get_logger("gateway.server")
limited = RateLimitedLogger("gateway.server")


# Negotiations kept for sharing (Gateway.negotiated): one per upstream and ApiVersions
# answer, so a cluster mode gateway in front of a large cluster mid-upgrade fits; past
# this they are forgotten and made again.
NEGOTIATED_KEPT = 256


class Gateway:
    def __init__(
        self, config: Config, metrics: Metrics | None = None, worker: WorkerRole | None = None
    ) -> None:
        assert config.upstream is not None, "the embedded stack sets upstream before start"
        self.config = config
        # None: a gateway of its own (one process); else one worker of a supervisor.
        self.worker = worker
        self.metrics = metrics or Metrics()
        self.metrics.max_software_labels = config.max_client_software_labels
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
        self._own_ranges = gateway_supported()
        # Keyed by upstream, its ranges and the shape of its features (not their epoch).
        self._negotiated: dict[tuple[object, ...], Negotiated] = {}
        self._feature_reports: dict[tuple[object, ...], FeatureReport] = {}
        self._software: dict[HostPort, BrokerSoftware] = {}
        self._servers: dict[str, asyncio.Server] = {}
        # Holds the listener-opening tasks so they are not garbage-collected mid-flight.
        self._broker_listeners: dict[int, asyncio.Task[None]] = {}
        self._stopping: asyncio.Event | None = None
        # Where each listener binds and forwards to, to reopen them after a pause.
        self._listen_specs: dict[str, tuple[HostPort, HostPort]] = {}
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
        self._limits_task: asyncio.Task[None] | None = None
        port = config.advertised_listen_port
        self.gateway_id = config.gateway_id or f"{config.advertised}:{port}"
        self.features = FeatureGate(config, self.metrics, self._features_changed, self.registration)
        if worker is not None:
            self.features.registers = False
            self.features.refuse_at_startup = False
        self.metrics.traffic.refresh = self._fold_live_connections
        self.started = False
        # Set once every listener (clients, metrics) is bound and serving: the command
        # line prints its "is up" banner then, not before (gateway.cli).
        self.serving = asyncio.Event()
        # Event-loop lag (kafka_gateway_event_loop_lag_seconds), measured from start().
        self.loop_lag = LoopLagMonitor(
            self.metrics.event_loop_lag, self.metrics.event_loop_lag_busy
        )
        self.stopping = False
        # /readyz's check of the upstream, in the process that serves /readyz only.
        self.upstream_watch: UpstreamWatch | None = None
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
        # [sni]: the one TLS listener routes each connection by its server name.
        self.sni: SniRouter | None = None
        if config.sni_broker_host is not None and isinstance(self.router, ClusterRouter):
            assert self.client_tls is not None  # the config requires [tls] with [sni]
            self.sni = SniRouter(config, self.router, self.metrics, self.upstream_tls)
            self.sni.install(self.client_tls)

    def upstream_server_hostname(self, address: HostPort) -> str | None:
        return upstream_server_hostname(self.config, address)

    # -- listeners -------------------------------------------------------------------
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
                    "/connections": json_route(self.connections_snapshot),
                },
            )
        await self.features.register_now()
        self.loop_lag.start()
        self._limits_task = asyncio.get_running_loop().create_task(
            self.limits.run(lambda: self.connections)
        )
        self.started = True
        self.serving.set()
        self._update_health()
        if self.worker is None:
            self.watch_upstream()
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
        await self.probe_upstream(upstream)
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
        ok, why = self.upstream_readiness()
        if not ok:
            return False, why
        return True, "ready"

    def watch_upstream(self) -> None:
        """Check the upstream for /readyz every readiness_upstream_check_ms (a single
        gateway, or a supervisor's control plane; not the workers)."""
        upstream, interval_ms = self.config.upstream, self.config.readiness_upstream_check_ms
        if upstream is None or interval_ms == 0 or self.config.metrics_listen is None:
            return
        tls, hostname = self.upstream_tls, self.upstream_server_hostname(upstream)
        self.upstream_watch = UpstreamWatch(
            upstream,
            lambda: probe_api_versions(upstream, tls, hostname),
            interval_ms / 1000,
            self.config.upstream_connect_timeout_s,
            on_error=self.metrics.upstream_connect_errors.labels(str(upstream)).inc,
        )
        self._spawn(self.upstream_watch.run())

    def upstream_readiness(self) -> tuple[bool, str]:
        return self.upstream_watch.readiness() if self.upstream_watch else (True, "")

    async def probe_upstream(self, upstream: HostPort) -> None:
        """Learn the upstream's ApiVersions before clients come (feature support, the
        startup check, the registration). A broker that is down now is not fatal: the
        first client connection will learn the same."""
        try:
            ranges, features = await asyncio.wait_for(
                probe_api_versions(
                    upstream, self.upstream_tls, self.upstream_server_hostname(upstream)
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
        self.advertised_ranges(upstream, ranges, upstream_features=features)

    async def _listen(self, name: str, address: HostPort, upstream: HostPort) -> None:
        self._listen_specs[name] = (address, upstream)
        loop = asyncio.get_running_loop()
        handover = self.worker.handover if self.worker is not None else None
        inherited = handover.take(name, address) if handover is not None else None
        if inherited is not None:
            # Upgrade in place: the old gateway's socket, accept queue and all.
            server = await loop.create_server(
                lambda: ClientConnection(self, name, upstream), sock=inherited, ssl=self.client_tls
            )
        else:
            server = await loop.create_server(
                lambda: ClientConnection(self, name, upstream),
                address.host,
                address.port,
                reuse_address=True,
                # Workers each open their own listener on the same port and the kernel
                # spreads connections over them. Chosen over sockets inherited from the
                # supervisor because cluster mode opens broker listeners at run time, as
                # Metadata reveals brokers: a worker can do that alone, with no hand-off.
                reuse_port=self.worker is not None,
                ssl=self.client_tls,
            )
        self._servers[name] = server
        bound = server.sockets[0].getsockname()
        log.info(
            "gateway.listening",
            listener=name,
            address=f"{bound[0]}:{bound[1]}",
            upstream=str(upstream),
            mode=self.config.mode,
            advertised=self._advertised_for(name, bound[1]),
            tls=self.client_tls is not None,
            upstream_tls=self.upstream_tls is not None,
        )

    def listening_sockets(self) -> list[tuple[str, HostPort, HostPort, socket.socket]]:
        """Each listener's name, address, upstream and socket (a duplicate): what an
        upgrade in place hands to the new gateway (gateway.server.handover)."""
        out = []
        for name, server in self._servers.items():
            address, upstream = self._listen_specs[name]
            for sock in server.sockets:
                out.append(
                    (name, address, upstream, socket.fromfd(sock.fileno(), sock.family, sock.type))
                )
        return out

    def _advertised_for(self, listener: str, bound_port: int) -> str:
        """The address clients are told for a listener (for the log line)."""
        cfg = self.config
        if listener.startswith("broker-"):
            override = cfg.advertised_brokers.get(int(listener.removeprefix("broker-")))
            if override is not None:
                return str(override)
            return str(HostPort(cfg.advertised, bound_port))
        port = cfg.advertised_port or bound_port
        if self.sni is not None:
            return f"{cfg.sni_bootstrap}:{port} and {cfg.sni_broker_host}:{port}"
        return str(HostPort(cfg.advertised, port))

    def _on_new_broker(self, node_id: int, address: HostPort) -> None:
        """Cluster mode: open (or re-point) the listener of a broker Metadata revealed."""
        name = f"broker-{node_id}"
        port = self.config.cluster_port(node_id)
        listen = HostPort(self.config.listen.host, port)
        if name in self._servers and self._listen_specs.get(name) == (listen, address):
            return  # served already (a socket inherited at an upgrade in place)
        old = self._servers.pop(name, None)
        if old is not None:
            log.info("gateway.broker_moved", node_id=node_id, upstream=str(address))
            old.close()

        async def open_listener() -> None:
            try:
                await self._listen(name, listen, address)
            except OSError as exc:
                log.error(
                    "gateway.broker_listener_failed",
                    node_id=node_id,
                    address=str(listen),
                    error=str(exc),
                    hint="set [cluster] port_base or ports so broker ports are free",
                )

        self._broker_listeners[node_id] = asyncio.get_running_loop().create_task(open_listener())

    # -- versions and broker software ---------------------------------------------------
    def synthesizes_describe_cluster(self, upstream: dict[int, VersionRange]) -> bool:
        """KIP-700 for any backend: answer DescribeCluster from Metadata when needed."""
        return self.config.synthesize_describe_cluster or DESCRIBE_CLUSTER not in upstream

    def negotiated(
        self,
        address: HostPort,
        upstream: dict[int, VersionRange],
        upstream_features: FeatureReport = NO_FEATURES,
    ) -> Negotiated:
        """The ranges (and features) of a connection to ``address`` that advertised
        ``upstream`` and reported ``upstream_features``.

        Every connection to one upstream gets the same answer, so it is made once and
        shared: the dicts of up to ~90 keys each were most of an idle connection's
        memory (about 14 kB of its 18 kB of Python objects) when each made its own.
        Forgotten when the feature caps change, and kept for a few upstreams only.
        """
        key = (address, tuple(upstream.items()), upstream_features.shape())
        found = self._negotiated.get(key)
        if found is not None:
            # The feature gate follows the latest answer of each upstream, as when every
            # connection negotiated for itself (a broker rolled back answers as before).
            self.features.set_available(str(address), found.available, upstream_features)
            return found
        available = negotiate(self._own_ranges, upstream)
        ranges = self.advertised_ranges(address, upstream, available, upstream_features)
        passthrough = dict(ranges)
        for api_key in dispatch.answered_here(self, upstream):
            passthrough.pop(api_key, None)
        caps = self.features.caps_for(upstream_features)
        for api_key, (low, high) in ranges.items():
            if caps.get(api_key, high) < low:
                passthrough.pop(api_key, None)  # advertised, refused until finalized
        if len(self._negotiated) >= NEGOTIATED_KEPT:
            self._negotiated.clear()
        lane = PlainTable(
            passthrough,
            dispatch.REWRITTEN_FROM,
            dispatch.lane_walks(passthrough),
            dispatch.lane_heads(passthrough),
            dispatch.LAST_HEADS,
            self.router,
        )
        found = self._negotiated[key] = Negotiated(upstream, available, ranges, passthrough, lane)
        return found

    def feature_report(self, upstream_features: FeatureReport) -> FeatureReport:
        """What clients of an upstream that reported ``upstream_features`` are told of
        features: the gateways' levels merged with the broker's (gateway.features.report).
        Kept per answer, epoch included, for a few answers; forgotten with the levels."""
        key = upstream_features.key()
        found = self._feature_reports.get(key)
        if found is None:
            if len(self._feature_reports) >= NEGOTIATED_KEPT:
                self._feature_reports.clear()
            found = self._feature_reports[key] = merge_reports(
                self.features.report(),
                upstream_features,
                self.features.catalogue,
                gating=self.features.enabled,
            )
        return found

    def advertised_ranges(
        self,
        address: HostPort,
        upstream: dict[int, VersionRange],
        available: dict[int, VersionRange] | None = None,
        upstream_features: FeatureReport = NO_FEATURES,
    ) -> dict[int, VersionRange]:
        """What clients of this upstream may use: own ∩ upstream ∩ feature caps
        (+ what the gateway answers itself).

        ``available``: own ∩ upstream, when the caller has it already.
        """
        if address not in self._software:
            software = fingerprint(upstream)
            self._software[address] = software
            log.info(
                "upstream.fingerprint",
                upstream=str(address),
                name=software.name,
                version=software.version,
                api_keys=len(upstream),
            )
            self._set_info(address)
        if available is None:
            available = negotiate(self._own_ranges, upstream)
        self.features.set_available(str(address), available, upstream_features)
        caps = self.features.caps_for(upstream_features)
        ranges = negotiate(self._own_ranges, upstream, caps)
        for key, whole in available.items():
            # An API a level gates whole (ConsumerGroupHeartbeat, the share-group APIs)
            # stays advertised and is answered UNSUPPORTED_VERSION until the level is
            # finalized, as Kafka 4.x does: clients then report "the cluster does not
            # support" at once (librdkafka's KIP-848 consumer only retried in silence
            # when the key was missing). Versions a level gates stay withheld.
            if key not in ranges and caps.get(key, whole[1]) < whole[0]:
                ranges[key] = whole
        for key in dispatch.served_for_upstream(self, upstream):
            # The gateway answers these itself (UpdateFeatures: the finalized levels live
            # in the gateways' ZooKeeper), so the upstream does not limit them; the
            # feature caps still do.
            low, high = self._own_ranges[key]
            high = min(high, caps.get(key, high))
            if low <= high:
                ranges[key] = (low, high)
        return ranges

    def _set_info(self, address: HostPort) -> None:
        shown = self.broker_software(address)
        self.metrics.set_info(
            gateway_id=self.gateway_id,
            gateway_version=__version__,
            broker_software_name=shown.name,
            broker_software_version=shown.version,
            upstream=str(address),
        )

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
        )

    def _features_changed(self) -> None:
        """Finalized levels or compatibility changed: re-cap every connection."""
        self._negotiated.clear()
        self._feature_reports.clear()
        for conn in list(self.connections):
            conn.renegotiate()
        self._update_health()

    def _update_health(self) -> None:
        compatible = self.features.compatible
        self.metrics.healthy.set(1 if compatible else 0)
        if not self.started or self.stopping:
            return
        if not compatible and self._servers:
            for server in self._servers.values():
                server.close()
            self._servers.clear()
            log.error("gateway.listeners_paused", reason="incompatible finalized feature levels")
        elif compatible and not self._servers and self._listen_specs:
            for name, (address, upstream) in list(self._listen_specs.items()):
                self._spawn(self._listen(name, address, upstream))
            log.info("gateway.listeners_resumed")

    def own_range(self, api_key: int) -> VersionRange | None:
        return self._own_ranges.get(api_key)

    def update_features_allowed(self, peer: str) -> bool:
        """Whether a client at ``peer`` ("host:port") may change finalized features."""
        host = peer.rpartition(":")[0].strip("[]")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self._update_allowed)

    def broker_software(self, address: HostPort) -> BrokerSoftware:
        """KIP-885 values for an upstream: configured, else its fingerprint."""
        cfg = self.config
        if cfg.broker_software_name is not None and cfg.broker_software_version is not None:
            return BrokerSoftware(cfg.broker_software_name, cfg.broker_software_version)
        return self._software.get(address, BrokerSoftware("unknown", "unknown"))

    def broker_software_of(self, node_id: int) -> BrokerSoftware | None:
        """KIP-885 values for a broker by node id; None when this gateway cannot know
        (a sidecar peer's broker, or a broker no connection has reached yet)."""
        if isinstance(self.router, ClusterRouter):
            try:
                address: HostPort | None = self.router.upstream_for(node_id)
            except KeyError:
                address = None
        elif node_id in self.config.peers:
            address = None
        else:
            address = self.config.upstream
        if address is None:
            return None
        if self.config.broker_software_name is None and address not in self._software:
            return None
        return self.broker_software(address)

    # -- connections -----------------------------------------------------------------
    def connection_opened(self, conn: ClientConnection) -> ClientInfo:
        self.connections.add(conn)
        info = self.registry.add(conn.peer, conn.listener)
        self.metrics.connections_total.labels(conn.listener).inc()
        self.metrics.connections_active.labels(conn.listener, *info.labels).inc()
        return info

    def connection_closed(self, conn: ClientConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.limits.charge(conn, conn.charged, 0)
            conn.fold_stats()
            if conn.info is not None:
                self.metrics.connections_active.labels(conn.listener, *conn.info.labels).dec()
                self.registry.remove(conn.info.connection_id)
        # Also a connection closed before it was served (held by the throttle).
        self.limits.release(conn)

    def connections_snapshot(self) -> list[dict[str, Any]]:
        """/connections: the registry, each connection's counts brought up to date."""
        for conn in self.connections:
            conn.sync_info()
        return self.registry.snapshot()

    def _fold_live_connections(self) -> None:
        for conn in list(self.connections):
            conn.fold_stats()

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
        """SIGHUP: re-read the TLS certificate files and the feature catalogue;
        connections stay up. A file that does not load keeps the old one."""
        try:
            if self.client_tls is not None:
                reload_client_chain(self.client_tls, self.config)
            catalogue_changed = self.features.reload_catalogue()
        except (TlsSetupError, CatalogueError) as exc:
            self.metrics.config_reloads.labels("failed").inc()
            key = exc.key if isinstance(exc, TlsSetupError) else "features.catalogue"
            limited.error("gateway.reload_failed", key=key, reason=str(exc), kept="old")
            return
        self.metrics.config_reloads.labels("ok").inc()
        log.info(
            "gateway.reload",
            result="ok",
            tls_cert=self.config.tls_cert,
            catalogue_changed=catalogue_changed,
        )

    def request_stop(self, why: str = "stop") -> None:
        log.info("gateway.stopping", signal=why)
        if self._stopping is not None:
            self._stopping.set()

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish, close what is left, deregister."""
        self.stopping = True  # readiness flips first
        for server in self._servers.values():
            server.close()
        for conn in list(self.connections):
            conn.drain()
        deadline = asyncio.get_running_loop().time() + self.config.drain_timeout_s
        while self.connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.abort()
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


async def probe_api_versions(
    address: HostPort,
    tls: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> tuple[dict[int, VersionRange], FeatureReport]:
    """Ask a broker ApiVersions on a connection of its own (``UPSTREAM_API_VERSIONS`` in
    turn): its ranges and the features it reports."""
    reader, writer = await asyncio.open_connection(
        address.host, address.port, ssl=tls, server_hostname=server_hostname
    )
    try:
        for wanted in internal.UPSTREAM_API_VERSIONS:
            version, request = internal.api_versions_request(-1, wanted)
            writer.write(request)
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            payload = await reader.readexactly(size)
            try:
                return parse_upstream_api_versions(payload[4:], version)
            except ApiVersionsError:
                continue
        raise ValueError("the upstream refused ApiVersions v0")
    finally:
        writer.close()
