"""Routing: which broker a listener forwards to, and which gateway address a broker gets.

Sidecar mode: one listener, one upstream broker; other brokers are reached through
their own sidecars (``peers``). Cluster mode: a bootstrap listener plus one listener
per broker, created as Metadata (or any rewritten response) reveals the broker.
Both routers are the ``AddressBook`` the address interceptor asks.
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import Config, HostPort, sni_name
from ..observability.logging import get_logger

log = get_logger("gateway.routing")


class SidecarRouter:
    # Answers come from the config alone, and the only thing a question teaches the
    # router (to warn once about a broker without a peer) never changes an answer:
    # see AddressBook.generation.
    generation = 0

    def __init__(self, config: Config) -> None:
        assert config.upstream is not None
        self._config = config
        # advertised_port: a load balancer or NodePort may forward another port here.
        self._self = (config.advertised, config.advertised_listen_port)
        self._warned: set[int] = set()

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        peer = self._config.peers.get(node_id)
        if peer is not None:
            return peer.host, peer.port
        own = self._config.node_id
        if own is not None and node_id != own and node_id not in self._warned:
            # Without a peer entry the client would be sent to this sidecar for another
            # broker's partitions; say so once rather than per response.
            self._warned.add(node_id)
            log.warning(
                "routing.unknown_peer",
                node_id=node_id,
                broker=f"{host}:{port}",
                hint="add it to [sidecar.peers] so clients reach that broker's gateway",
            )
        return self._self


class ClusterRouter:
    """Learns brokers from rewritten responses and asks for a listener for each new one.

    With [sni] broker_host set there are no per-broker listeners: every broker is
    advertised as its server name on the one shared port (``gateway.server.sni`` routes
    the connections), so a new broker only needs to be remembered.
    """

    def __init__(self, config: Config, on_new_broker: Callable[[int, HostPort], None]) -> None:
        self._config = config
        self._on_new_broker = on_new_broker
        self.brokers: dict[int, HostPort] = {}
        # Bumped whenever ``brokers`` changes (see AddressBook.generation): answers come
        # from the config alone, but asking again about a broker whose address another
        # response changed since would change ``brokers`` back.
        self.generation = 0

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        cfg = self._config
        known = self.brokers.get(node_id)
        if known is None or known.host != host or known.port != port:
            self.brokers[node_id] = HostPort(host, port)
            self.generation += 1
            if cfg.sni_broker_host is None:
                self._on_new_broker(node_id, self.upstream_for(node_id))
        override = cfg.advertised_brokers.get(node_id)
        if override is not None:
            return override.host, override.port
        if cfg.sni_broker_host is not None:
            return sni_name(cfg.sni_broker_host, node_id), cfg.advertised_listen_port
        return cfg.advertised, cfg.cluster_port(node_id)

    def upstream_for(self, node_id: int) -> HostPort:
        """Where the gateway dials a broker: broker_upstreams, else what it advertises.

        KeyError for a broker that is neither configured nor learned yet.
        """
        pinned = self._config.broker_upstreams.get(node_id)
        return pinned if pinned is not None else self.brokers[node_id]
