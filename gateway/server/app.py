"""The gateway process: listeners, the connection set, signals and graceful shutdown."""

from __future__ import annotations

import asyncio
import signal

from ..clients import ClientInfo, ConnectionRegistry
from ..config import Config, HostPort
from ..interceptors.api_versions import SoftwareTags
from ..observability.logging import get_logger
from ..observability.metrics import Metrics
from ..protocol import DESCRIBE_CLUSTER
from ..versions import (
    BrokerSoftware,
    VersionRange,
    fingerprint,
    gateway_supported,
    negotiate,
)
from .proxy import ClientConnection
from .routing import ClusterRouter, SidecarRouter

log = get_logger("gateway.server")


class Gateway:
    def __init__(self, config: Config, metrics: Metrics | None = None) -> None:
        assert config.upstream is not None, "the embedded stack sets upstream before start"
        self.config = config
        self.metrics = metrics or Metrics()
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
        self._software: dict[HostPort, BrokerSoftware] = {}
        self._servers: dict[str, asyncio.Server] = {}
        # Holds the listener-opening tasks so they are not garbage-collected mid-flight.
        self._broker_listeners: dict[int, asyncio.Task[None]] = {}
        self._stopping: asyncio.Event | None = None
        self.ready = False

    # -- listeners -------------------------------------------------------------------
    async def start(self) -> None:
        self._stopping = asyncio.Event()
        upstream = self.config.upstream
        assert upstream is not None
        name = "bootstrap" if self.config.mode == "cluster" else "sidecar"
        await self._listen(name, self.config.listen, upstream)
        if self.config.metrics_listen is not None:
            self.metrics.serve(self.config.metrics_listen.host, self.config.metrics_listen.port)
        self.ready = True

    async def _listen(self, name: str, address: HostPort, upstream: HostPort) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: ClientConnection(self, name, upstream),
            address.host,
            address.port,
            reuse_address=True,
        )
        self._servers[name] = server
        bound = server.sockets[0].getsockname()
        log.info(
            "gateway.listening",
            listener=name,
            address=f"{bound[0]}:{bound[1]}",
            upstream=str(upstream),
            mode=self.config.mode,
            advertised=f"{self.config.advertised}:{bound[1]}",
        )

    def _on_new_broker(self, node_id: int, address: HostPort) -> None:
        """Cluster mode: open (or re-point) the listener of a broker Metadata revealed."""
        name = f"broker-{node_id}"
        old = self._servers.pop(name, None)
        if old is not None:
            log.info("gateway.broker_moved", node_id=node_id, upstream=str(address))
            old.close()
        port = self.config.cluster_port(node_id)
        listen = HostPort(self.config.listen.host, port)

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

    def advertised_ranges(
        self, address: HostPort, upstream: dict[int, VersionRange]
    ) -> dict[int, VersionRange]:
        """What clients of this upstream may use: own ∩ upstream (+ DescribeCluster)."""
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
        ranges = negotiate(self._own_ranges, upstream)
        if self.synthesizes_describe_cluster(upstream):
            ranges[DESCRIBE_CLUSTER] = self._own_ranges[DESCRIBE_CLUSTER]
        return ranges

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
            address = self.router.brokers.get(node_id)
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
        self.metrics.connections_total.labels(conn.listener).inc()
        self.metrics.connections_active.labels(conn.listener).inc()
        return self.registry.add(conn.peer, conn.listener)

    def connection_closed(self, conn: ClientConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.metrics.connections_active.labels(conn.listener).dec()
            if conn.info is not None:
                self.registry.remove(conn.info.connection_id)

    # -- lifecycle -------------------------------------------------------------------
    async def serve_forever(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig.name)
        await self.start()
        assert self._stopping is not None
        await self._stopping.wait()
        await self.shutdown()

    def request_stop(self, why: str = "stop") -> None:
        log.info("gateway.stopping", signal=why)
        if self._stopping is not None:
            self._stopping.set()

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish, then close what is left."""
        self.ready = False
        for server in self._servers.values():
            server.close()
        for conn in list(self.connections):
            conn.drain()
        deadline = asyncio.get_running_loop().time() + self.config.drain_timeout_s
        while self.connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.abort()
        log.info("gateway.stopped", unfinished_connections=len(self.connections))
