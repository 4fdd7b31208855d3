"""Listeners and addresses: where clients connect, and what they are told to come back to.

The top level, [sidecar], [cluster] and [sni] of the TOML file.
"""

# setting() is a dataclasses.field with metadata; ruff only knows field() itself as one.
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from ._declare import ConfigError, HostPort, Port, Shape, setting

Mode = Annotated[Literal["sidecar", "cluster"], Shape("'sidecar' or 'cluster'")]
Listener = Annotated[HostPort, Shape(default_host="127.0.0.1")]


def _node_id(key: str, value: int | None) -> None:
    if value is not None and value < 0:
        raise ConfigError(key, f"node ids are >= 0, got {value}")


@dataclass(frozen=True)
class Addresses:
    """Listeners and addresses."""

    __slots__ = ()

    listen: Listener = setting(
        HostPort("127.0.0.1", 9092),
        flag="--listen",
        example="0.0.0.0:9092",
        why="where clients connect; in cluster mode the bootstrap listener",
    )
    mode: Mode = setting(
        "sidecar",
        flag="--mode",
        why="sidecar: one upstream broker; cluster: one listener per broker of a cluster",
    )
    advertised_host: str | None = setting(
        None,
        flag="--advertised-host",
        metavar="HOST",
        default_means="the listen host (with [sni]: its bootstrap_host)",
        example="kafka-0.gateway.example",
        why="the host clients are told to use for this gateway (in Metadata, "
        "FindCoordinator, DescribeCluster and KIP-951 node endpoints); required when "
        "listen binds every interface",
    )
    advertised_port: Port | None = setting(
        None,
        flag="--advertised-port",
        metavar="PORT",
        default_means="the port the gateway listens on",
        example=443,
        why="the port clients are told for listen, when a load balancer or NodePort "
        "forwards it to the gateway",
    )
    node_id: int | None = setting(
        None,
        table="sidecar",
        name="node_id",
        check=_node_id,
        default_means="any broker not in peers (fine for a single broker)",
        example=0,
        why="sidecar: the node id of the broker this gateway stands beside",
    )
    peers: dict[int, HostPort] = setting(
        factory=dict,
        table="sidecar",
        name="peers",
        example={1: "kafka-1.gateway.example:9092", 2: "kafka-2.gateway.example:9092"},
        why='sidecar: where the gateways of the other brokers are reached, node id = "host:port"',
    )
    port_base: int | None = setting(
        None,
        table="cluster",
        name="port_base",
        default_means="the listen port + 1",
        example=19092,
        why="cluster: broker N gets a listener on port_base + N",
    )
    ports: dict[int, Port] = setting(
        factory=dict,
        table="cluster",
        name="ports",
        example={0: 19092},
        why="cluster: the listener port of a broker, node id = port, in place of port_base + N",
    )
    advertised_brokers: dict[int, HostPort] = setting(
        factory=dict,
        table="cluster",
        name="advertised_brokers",
        flag="--advertise-broker",
        example={0: "lb.example:31000"},
        why="cluster: per node id, the address clients are told for that broker (a load "
        "balancer or NodePort in front of it), in place of advertised_host and its "
        "listener port (or its SNI name and the shared port)",
    )
    broker_upstreams: dict[int, HostPort] = setting(
        factory=dict,
        table="cluster",
        name="broker_upstreams",
        flag="--broker-upstream",
        example={0: "10.0.0.10:9092"},
        why="cluster: per node id, where the gateway dials that broker, for brokers whose "
        "advertised address the gateway cannot reach",
    )
    sni_broker_host: str | None = setting(
        None,
        table="sni",
        name="broker_host",
        flag="--sni-broker-host",
        metavar="PATTERN",
        default_means="off (a listener per broker)",
        example="broker-{node_id}.kafka.example.com",
        see="tls-sasl-sni.md#one-tls-port-for-a-whole-cluster-sni",
        why='cluster + TLS: a broker name pattern with "{node_id}"; every broker is '
        "served on the one TLS listen port and routed by the TLS server name (SNI); other "
        "names, or none, are refused in the handshake",
    )
    sni_bootstrap_host: str | None = setting(
        None,
        table="sni",
        name="bootstrap_host",
        flag="--sni-bootstrap-host",
        metavar="NAME",
        default_means="the advertised host",
        example="bootstrap.kafka.example.com",
        why="with [sni]: the server name that reaches the upstream",
    )

    @property
    def advertised(self) -> str:
        if self.advertised_host:
            return self.advertised_host
        if self.sni_broker_host is not None and self.sni_bootstrap_host is not None:
            return self.sni_bootstrap_host  # with SNI, the name clients bootstrap from
        return self.listen.host

    @property
    def advertised_listen_port(self) -> int:
        return self.advertised_port if self.advertised_port is not None else self.listen.port

    @property
    def sni_bootstrap(self) -> str:
        return self.sni_bootstrap_host or self.advertised

    def cluster_port(self, node_id: int) -> int:
        if node_id in self.ports:
            return self.ports[node_id]
        base = self.port_base if self.port_base is not None else self.listen.port + 1
        return base + node_id


def sni_name(pattern: str, node_id: int) -> str:
    """The server name of a broker under an [sni] broker_host pattern."""
    return pattern.format(node_id=node_id)


def sni_node_id(pattern: str, server_name: str) -> int | None:
    """The node id a server name names under ``pattern``; None when it names none.

    DNS names compare without case (RFC 4343), so the match ignores it too.
    """
    prefix, _, suffix = pattern.lower().partition("{node_id}")
    name = server_name.lower()
    if not (name.startswith(prefix) and name.endswith(suffix)):
        return None
    digits = name[len(prefix) : len(name) - len(suffix)]
    # "broker-007" is not broker 7: only the spelling the gateway advertises routes.
    if not digits.isascii() or not digits.isdigit() or digits != str(int(digits)):
        return None
    return int(digits)
