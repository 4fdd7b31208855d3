"""The gateway's client listeners: opening them (or taking an old gateway's sockets at
an upgrade in place), one per broker as cluster mode learns of brokers, pausing and
resuming them with the feature levels' compatibility.

``Gateway`` takes this role from ``Listeners``; each accepted connection is a
``ClientConnection`` of that gateway.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

from ..config import Config, HostPort
from ..observability.logging import get_logger
from ..observability.metrics import Metrics
from .features import FeatureGate
from .proxy import ClientConnection
from .sni import SniRouter
from .worker_role import WorkerRole

log = get_logger("gateway.server")


class Listeners:
    """The listener role of ``Gateway``."""

    # Of the gateway that takes this role.
    config: Config
    metrics: Metrics
    features: FeatureGate
    worker: WorkerRole | None
    client_tls: ssl.SSLContext | None
    upstream_tls: ssl.SSLContext | None
    sni: SniRouter | None
    started: bool
    stopping: bool
    _spawn: Callable[[Coroutine[Any, Any, None]], None]

    def _init_listeners(self) -> None:
        self._servers: dict[str, asyncio.Server] = {}
        # Holds the listener-opening tasks so they are not garbage-collected mid-flight.
        self._broker_listeners: dict[int, asyncio.Task[None]] = {}
        # Where each listener binds and forwards to, to reopen them after a pause.
        self._listen_specs: dict[str, tuple[HostPort, HostPort]] = {}

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
