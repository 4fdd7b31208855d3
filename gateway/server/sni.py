"""One TLS port for a whole cluster: each connection goes to the broker its TLS server
name (SNI) names.

Cluster mode with ``[sni] broker_host = "broker-{node_id}.kafka.example.com"``: the
bootstrap listener is the only listener. Every broker is advertised as its name under
that pattern on the shared port (``ClusterRouter.advertise``), so a client's connection
to broker 3 carries the server name ``broker-3.kafka.example.com`` in its ClientHello;
the bootstrap name (``[sni] bootstrap_host``, default the advertised host) reaches the
configured upstream, or when that cannot be reached the next broker the gateway knows.
A broker name whose node id the gateway has not learned yet (each worker learns from
the Metadata it forwards; a client may come back after a restart with old metadata) is
looked up in the bootstrap upstream's Metadata before the connection dials it. Any
other name, or none, is refused during the handshake, with a rate-limited log line and
``kafka_gateway_sni_refused_total{reason}`` (``unknown_broker``: the lookup did not name
it either, and the connection closes after the handshake). OpenSSL makes the TLS alert
``unrecognized_name``; uvloop closes the socket on a failed handshake without flushing
it, so a client may see only the close.

Why ``SSLContext.sni_callback`` and not a peek at the ClientHello before the handshake:
the standard library already parses the ClientHello, the callback runs before the
server's first flight (so a refusal costs the client no certificate exchange), and it
works the same under uvloop and asyncio. The callback receives the connection's
``SSLObject``; the route is stored on it and read back in
``ClientConnection.connection_made`` through ``transport.get_extra_info("ssl_object")``,
which is that same object once the handshake is done.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import HostPort, sni_name, sni_node_id
from ..kafka_client import probe_metadata
from ..observability.logging import RateLimitedLogger
from ..tls import upstream_server_hostname

if TYPE_CHECKING:
    from ..config import Config
    from ..observability.metrics import Metrics
    from .routing import ClusterRouter

# Refusals come from clients at will: rate-limited per reason.
limited = RateLimitedLogger("gateway.sni")

# The attribute of the SSLObject that carries the route from the handshake to the
# connection; prefixed so it cannot shadow anything the ssl module may add.
_ROUTE = "_kafka_gateway_route"


# A Metadata lookup for unknown broker names at most this often: names are the
# client's choice, and each lookup costs the upstream a connection.
LOOKUP_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class Route:
    listener: str  # "bootstrap" or "broker-<node id>", as the per-port listeners are named
    upstream: HostPort
    # Tried in turn when ``upstream`` cannot be reached: the bootstrap name reaches any
    # live broker, not only the configured one.
    fallbacks: tuple[HostPort, ...] = ()
    # A broker name whose node id no Metadata has named yet: the connection asks the
    # bootstrap upstream (``SniRouter.look_up``) before it dials.
    unknown_node: int | None = None


class SniRouter:
    """Maps TLS server names to upstream brokers for the one shared listener."""

    def __init__(
        self,
        config: Config,
        router: ClusterRouter,
        metrics: Metrics,
        upstream_tls: ssl.SSLContext | None = None,
    ) -> None:
        assert config.sni_broker_host is not None and config.upstream is not None
        self._config = config
        self._upstream_tls = upstream_tls
        # One Metadata lookup at a time, shared by the connections waiting for it.
        self._lookup: asyncio.Task[None] | None = None
        self._looked_up_at = 0.0
        self._pattern = config.sni_broker_host
        self._bootstrap_name = config.sni_bootstrap.lower()
        self._bootstrap = Route("bootstrap", config.upstream)
        self._router = router
        self._pinned = config.broker_upstreams
        self._metrics = metrics
        # A client (or a scanner) can send bad names in a loop: one line per reason per 10 s.

    def install(self, context: ssl.SSLContext) -> None:
        """Route by server name on every connection accepted with ``context``."""
        context.sni_callback = self._on_server_name

    def route(self, server_name: str | None) -> Route | str:
        """The route for a server name, or the reason it has none."""
        if server_name is None:
            return "missing_server_name"
        if server_name.lower() == self._bootstrap_name:
            return Route("bootstrap", self._bootstrap.upstream, self._known_brokers())
        node_id = sni_node_id(self._pattern, server_name)
        if node_id is None:
            return "unknown_server_name"
        try:
            return Route(f"broker-{node_id}", self._router.upstream_for(node_id))
        except KeyError:
            # Matches the pattern, but no Metadata through this gateway (or this worker)
            # named the broker yet, e.g. a client with cached metadata after a restart.
            return Route(f"broker-{node_id}", self._bootstrap.upstream, unknown_node=node_id)

    async def look_up(self, node_id: int, peer: str) -> HostPort | None:
        """Where broker ``node_id`` is, after asking the bootstrap upstream's Metadata;
        None (logged and counted as unknown_broker) when it names no such broker."""
        loop = asyncio.get_running_loop()
        fresh = self._lookup is not None and loop.time() - self._looked_up_at < LOOKUP_INTERVAL_S
        if self._lookup is None or (self._lookup.done() and not fresh):
            self._looked_up_at = loop.time()
            self._lookup = loop.create_task(self._learn_brokers())
        try:
            await asyncio.shield(self._lookup)
        except Exception as exc:  # an unreadable answer must not leave the client hanging
            error: str | None = str(exc) or type(exc).__name__
        else:
            error = None
        try:
            return self._router.upstream_for(node_id)
        except KeyError:
            self._refused("unknown_broker", sni_name(self._pattern, node_id), peer, error)
            return None

    async def _learn_brokers(self) -> None:
        """Metadata (no topics) from the bootstrap upstream; the router learns its brokers."""
        address = self._bootstrap.upstream
        metadata = await probe_metadata(
            address.host,
            address.port,
            self._upstream_tls,
            upstream_server_hostname(self._config, address),
            self._config.upstream_connect_timeout_s,
        )
        for broker in metadata.brokers:
            self._router.advertise(int(broker.node_id), broker.host, int(broker.port))

    def _known_brokers(self) -> tuple[HostPort, ...]:
        """Every broker pinned or learned so far, other than the bootstrap upstream."""
        router = self._router
        node_ids = sorted({*router.brokers, *self._pinned})
        found = dict.fromkeys(router.upstream_for(n) for n in node_ids)
        found.pop(self._bootstrap.upstream, None)
        return tuple(found)

    @staticmethod
    def routed(ssl_object: object) -> Route | None:
        """The route the handshake chose for this connection's SSLObject."""
        return getattr(ssl_object, _ROUTE, None)

    def _on_server_name(
        self, ssl_object: ssl.SSLObject, server_name: str | None, _context: ssl.SSLContext
    ) -> int | None:
        route = self.route(server_name)
        if isinstance(route, Route):
            setattr(ssl_object, _ROUTE, route)
            return None
        self._refused(route, server_name)
        return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME

    def _refused(
        self,
        reason: str,
        server_name: str | None,
        peer: str | None = None,
        error: str | None = None,
    ) -> None:
        self._metrics.sni_refused.labels(reason).inc()
        limited.warning(
            "sni.refused",
            limit_key=reason,
            reason=reason,
            server_name=server_name,
            bootstrap_name=self._bootstrap_name,
            broker_names=self._pattern,
            hint="clients must connect by the bootstrap name or a broker name from "
            "Metadata, and send it as TLS server name (SNI)",
            **({"peer": peer} if peer else {}),
            **({"metadata_error": error} if error else {}),
        )
