"""The ports a gateway is configured to bind, checked before it starts.

A second ``scripts/run`` while one runs used to start a whole ZooKeeper and broker,
print "is up", then die on a raw "address already in use" log line. The command line
now binds every configured port here first and holds them while the embedded stack
starts, so a taken port fails in a moment with one line naming the flag to change.

The check binds as the listeners will (SO_REUSEADDR, so a restart is not refused for
the last run's TIME_WAIT connections) but without SO_REUSEPORT: a port that another
gateway's workers serve with SO_REUSEPORT counts as taken, where the workers of this
one would silently join them and split that gateway's clients.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from ..config import Config, HostPort


@dataclass(frozen=True)
class Port:
    """One configured port, and where the user sets it."""

    address: HostPort
    flag: str | None  # the command-line flag; None: the config file only
    key: str  # the config key

    def advice(self) -> str:
        how = f"{self.flag} HOST:PORT (config: {self.key})" if self.flag else self.key
        return (
            f"{self.address} is already in use (another kafka-gateway or scripts/run?); "
            f"pick another with {how}"
        )


class PortInUse(Exception):
    def __init__(self, port: Port) -> None:
        super().__init__(port.advice())
        self.port = port


def configured_ports(config: Config) -> list[Port]:
    """The fixed ports of ``config`` (port 0, any free one, cannot be taken)."""
    ports = []
    if config.listen.port:
        ports.append(Port(config.listen, "--listen", "listen"))
    metrics = config.metrics_listen
    if metrics is not None and metrics.port:
        ports.append(Port(metrics, "--metrics-listen", "metrics_listen"))
    if config.mode == "cluster" and config.sni_broker_host is None:
        # Broker listeners open as Metadata reveals the brokers; only those pinned in
        # [cluster] ports are known now (port_base + node id waits for the node ids).
        for node_id, port in sorted(config.ports.items()):
            key = f"[cluster] ports ({node_id} = {port}) or port_base in the config file"
            ports.append(Port(HostPort(config.listen.host, port), None, key))
    return ports


def hold(ports: Iterable[Port]) -> list[socket.socket]:
    """Bind every port (not listening, so no client is accepted and left waiting) and
    return the sockets; the caller closes them just before the gateway binds for real.
    Raises PortInUse for the first port that is taken."""
    held: list[socket.socket] = []
    try:
        for port in ports:
            held.extend(_bind(port))
    except BaseException:
        for sock in held:
            sock.close()
        raise
    return held


def first_taken(ports: Iterable[Port]) -> Port | None:
    """The first of ``ports`` that cannot be bound now (after a failed start: which one
    it was, whoever took it since the check)."""
    for port in ports:
        try:
            for sock in hold([port]):
                sock.close()
        except PortInUse:
            return port
    return None


def _bind(port: Port) -> list[socket.socket]:
    host, number = port.address.host, port.address.port
    try:
        infos = socket.getaddrinfo(
            host or None, number, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror:
        return []  # the listener reports a host that does not resolve, as before
    bound: list[socket.socket] = []
    # Every address the host resolves to, as asyncio's create_server binds them.
    for family, kind, proto, _, sockaddr in dict.fromkeys(infos):
        sock = socket.socket(family, kind, proto)
        bound.append(sock)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):  # as create_server: v6 only, v4 apart
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind(sockaddr)
        except OSError as exc:
            for done in bound:
                done.close()
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(port) from None
            return []  # not ours to judge (an address not on this host): the listener's
    return bound
