"""One proxied connection: the client socket's asyncio protocol, which owns the pair and
moves bytes between its two sockets.

All protocol decisions are made by the sans-I/O readers in ``gateway.protocol``, the
scanner they call first, and the interceptors; this module only moves their output
between the two sockets and closes both sides together. Its other roles are parts it
makes and holds, each with a narrow interface (the part's module names a ``Protocol``
for what it needs of the connection):

- ``reads`` (``reads.lane.Reads``, compiled): both sockets' reads. It forwards what the
  scanner takes and hands the rest back here (``reads.Owner``: ``data_received``,
  ``upstream_data``, the Python path);
- ``requests``, ``responses``: the readers, and the in-flight table they share;
- ``exchange`` (``exchange.ConnectionExchange``): the connection as interceptors see
  it (``gateway.interceptors.context.Exchange``), and which requests go to them;
- ``flow`` (``flow.Flow``): why each side's reading is paused;
- ``budget`` (``budget.Budget``): the connection as the limits see it;
- ``traffic`` (``traffic.Traffic``): its counts, for the metrics, /connections and the
  request log;
- the upstream: dialled by ``dialing.dial``, read by ``dialing.UpstreamConnection``.

The connection knows no API by name: which requests and responses interceptors take,
and what becomes of them, is ``exchange``'s and ``gateway.interceptors.dispatch``'s.

Life of a connection: the client connects → the gateway dials the upstream and asks it
ApiVersions on its own behalf → once the answer is in, the client's bytes (held until
then) are read and take the way above.
"""

from __future__ import annotations

import asyncio
from typing import cast

from ..client_info import ClientInfo
from ..config import HostPort
from ..features.report import NO_FEATURES, FeatureReport
from ..interceptors import dispatch
from ..interceptors.context import InternalHandler
from ..observability.logging import get_logger
from ..protocol import (
    DroppedResponse,
    InFlight,
    Item,
    ProtocolViolation,
    RequestFrame,
    RequestReader,
    ResponseFrame,
    ResponseHead,
    ResponseReader,
    ResponseTail,
    UnreadableResponse,
)
from ..tls import client_identity
from ..versions import VersionRange
from . import allocator
from .budget import Budget
from .dialing import UpstreamConnection, dial
from .exchange import ConnectionExchange, limited
from .flow import (
    BACKPRESSURE,
    DRAINING,
    HELD,
    PENDING_HIGH,
    THROTTLED,
    WRITE_BUFFER_HIGH,
    WRITE_BUFFER_LOW,
    Flow,
    linger_close,
    write_all,
)
from .reads import READ_BYTES, lane
from .reads import RECV as _RECV  # noqa: F401  (tests and the bench fill it)
from .services import GatewayServices
from .traffic import Traffic

# Large buffers (a partial frame of up to max_frame_bytes) go back to the system when
# freed, not to the heap (allocator.py): every process that serves connections imports
# this module before its first one (the workers' fork server among them, whose setting
# each forked worker inherits).
allocator.pin_mmap_threshold()


log = get_logger("gateway.proxy")

# Whether an upstream answers acks=0 produces (Tansu does, Kafka does not), as the last
# connection to it found out: a new connection starts from that instead of guessing
# (see InFlight). One entry per upstream address.
_acks0_answered: dict[HostPort, bool] = {}

# What the scanner may take of a negotiation's pass-through table (Gateway.negotiated).

# Items of a reader's output that are forwarded as they are. A tuple, not ``bytes |
# memoryview``: the union would be built anew at every isinstance on the hot path.
_BUFFERS = (bytes, memoryview)


class ClientConnection(asyncio.BufferedProtocol):
    """The client side. Owns the pair: it dials the upstream and tears both down, and
    holds the parts above; a read goes to the scanner first (``reads``), what it leaves
    to its reader, and what comes out to the other socket."""

    # Slots: a gateway holds tens of thousands of these (a __dict__: ~1.3 kB each).
    __slots__ = (
        "_closed",
        "_held",
        "_throttle",
        "budget",
        "buffer_updated",
        "client",
        "exchange",
        "feature_report",
        "flow",
        "gateway",
        "held_size",
        "inflight",
        "info",
        "listener",
        "peer",
        "peer_ip",
        "principal",
        "ranges",
        "reads",
        "requests",
        "responses",
        "tls_subject",
        "traffic",
        "upstream",
        "upstream_address",
        "upstream_features",
        "upstream_ranges",
    )

    get_buffer = staticmethod(lane.get_buffer)

    def __init__(self, gateway: GatewayServices, listener: str, upstream: HostPort) -> None:
        self.gateway = gateway
        self.listener = listener
        self.upstream_address = upstream
        max_frame_bytes = gateway.config.max_frame_bytes
        self.inflight = inflight = InFlight()
        inflight.acks0_answered = _acks0_answered.get(upstream)
        self.exchange = ConnectionExchange(self)
        self.requests = RequestReader(inflight, self.exchange.intercepts, max_frame_bytes)
        self.responses = ResponseReader(
            inflight, dispatch.intercepts_response, max_frame_bytes, dispatch.stream_policy
        )
        self.flow = Flow(self)
        self.budget = Budget(self)
        self.traffic = Traffic(self)
        self.reads = lane.Reads(
            self, self.flow, inflight, max_frame_bytes, gateway.limits, self.budget
        )
        # uvloop takes a protocol's buffer_updated once, when the transport is made: the
        # compiled reads' own method, so a read runs no Python frame here.
        self.buffer_updated = self.reads.client_read
        if gateway.request_log is not None:
            inflight.observer = self.reads.observer = self.traffic.log_request
        # The transports, also held by ``reads`` (``_client_made``, ``upstream_made``).
        self.client: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.info: ClientInfo | None = None
        self.peer = self.peer_ip = "?"
        self.tls_subject: str | None = None
        # "User:..." from a certificate, until a SASL login replaces it (server.logins).
        self.principal: str | None = None
        # Negotiated ranges; None until the upstream answered ApiVersions.
        self.ranges: dict[int, VersionRange] | None = None
        self.upstream_ranges: dict[int, VersionRange] = {}
        # The features the upstream reported, and what clients are told (both merged).
        self.upstream_features = NO_FEATURES
        self.feature_report = NO_FEATURES
        # Client bytes that arrived before negotiation finished.
        self._held: list[bytes] = []
        self.held_size = 0
        self._closed = False
        # The pending start of a connection held by the creation-rate throttle.
        self._throttle: asyncio.TimerHandle | None = None

    # -- client socket -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence the cast.
        client = cast(asyncio.Transport, transport)
        self._client_made(client)
        peer = client.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.peer_ip = peer[0] if peer else "?"
        delay = self.gateway.limits.accept(self.budget)
        if delay is None:  # over a cap or the creation rate: closed at accept, as in Kafka
            self._closed = True
            client.abort()
            return
        if delay > 0:
            # Over max_connection_creation_rate: Kafka's acceptor waits before taking
            # the connection; the kernel has taken it here, so it is held unread (its
            # bytes wait in the socket) until its token is due.
            self.flow.pause_client(THROTTLED)
            self._throttle = asyncio.get_running_loop().call_later(delay, self._serve)
            return
        self._serve()

    def _client_made(self, client: asyncio.Transport) -> None:
        client.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        self.client = self.reads.client = client

    def _serve(self) -> None:
        """Start serving an accepted connection (at once, or after its throttle)."""
        client = self.client
        assert client is not None
        if self._throttle is not None:
            self._throttle = None
            if self._closed:
                return
            self.flow.resume_client(THROTTLED)
        self.budget.opened_at = self.gateway.limits.clock()
        ssl_object = client.get_extra_info("ssl_object")
        # The verified client certificate (TLS with client auth): its subject for log
        # lines, and its principal (ssl.principal.mapping.rules).
        self.tls_subject, self.principal = client_identity(
            ssl_object, self.gateway.config.tls_principal_mapping_rules
        )
        fallbacks: tuple[HostPort, ...] = ()
        unknown_node = None
        if self.gateway.sni is not None:
            # One port for every broker: the handshake's server name chose the broker.
            route = self.gateway.sni.routed(ssl_object)
            if route is None:  # the handshake refuses unroutable names; never here
                client.abort()
                return
            self.listener, self.upstream_address = route.listener, route.upstream
            fallbacks, unknown_node = route.fallbacks, route.unknown_node
        self.info = self.gateway.connection_opened(self)
        if self._closed:  # the gateway is stopping (Gateway.connection_opened)
            return
        asyncio.get_running_loop().create_task(dial(self, fallbacks, unknown_node))

    def data_received(self, data: bytes) -> None:
        """A client read the scanner did not take (or what was left of it)."""
        if self._closed:
            return  # requests that come after a drain are not read (``flow.linger_close``)
        if self.info is not None and self.info.awaiting_first:  # hook: first request's client id
            self.gateway.registry.first_read(self, data)
        reads = self.reads
        if self.ranges is None:
            self._held.append(data)
            self.held_size += len(data)
            if self.held_size > PENDING_HIGH:
                self.flow.pause_client(HELD)
        else:
            reads.bytes_in += len(data)
            items = self.requests.feed(data)
            if len(items) == 1 and items[0] is data:  # forwarded whole, the commonest
                self.upstream.write(data)  # type: ignore[union-attr]
            else:
                self._to_upstream(items)
            self.scan_state()
        if reads.budget_on:
            self.budget.recharge()

    def _to_upstream(self, items: list[Item]) -> None:
        upstream = self.upstream
        assert upstream is not None  # ranges are only known once upstream is connected
        for item in items:
            if isinstance(item, _BUFFERS):
                upstream.write(item)
            elif isinstance(item, RequestFrame):
                try:
                    dispatch.on_request(self.exchange, item)
                except Exception as exc:  # a bug must cost this connection, not the loop
                    self.exchange.handler_failed(item, exc)
                    return
            elif isinstance(item, ProtocolViolation):
                self.exchange.violated("client", item)
                return

    def eof_received(self) -> bool:
        return False  # Kafka does not half-close: close both directions.

    def connection_lost(self, exc: Exception | None) -> None:
        if self.requests.mid_frame and not self._closed:
            self.gateway.metrics.client_aborts.inc()
            limited.info(
                "connection.client_aborted_mid_request", peer=self.peer, listener=self.listener
            )
        if self.inflight.acks0_answered is not None:
            _acks0_answered[self.upstream_address] = self.inflight.acks0_answered
        if self._throttle is not None:  # closed while held by the throttle
            self._throttle.cancel()
            self._throttle = None
        self.close()
        self.gateway.connection_closed(self)

    def pause_writing(self) -> None:
        self.flow.pause_upstream(BACKPRESSURE)

    def resume_writing(self) -> None:
        self.flow.resume_upstream(BACKPRESSURE)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def draining(self) -> bool:
        return self.reads.draining

    def in_flight(self) -> int:
        """Requests awaiting a response."""
        return len(self.inflight)

    def who(self) -> dict[str, object]:
        """Who this is, for log lines: the registry's fields once it is served."""
        return self.info.log_fields() if self.info is not None else {"peer": self.peer}

    def drained(self) -> None:
        """Draining, the scanner took a read of responses: close once none is left."""
        if not self.in_flight():
            self.close(linger=True)

    def answered_here(self) -> None:
        """A response made here went out (``exchange.answer``): a draining connection
        closes once none is left, as after an upstream's; else the scanner may go on."""
        if self.reads.draining:
            self.drained()
        else:
            self.scan_state()

    def scan_state(self) -> None:
        """Say which reads the scanner may take next, after the Python path read: a
        side's, when its reader is between frames and no SASL exchange is on (raw
        tokens are no frames to scan). The scanner's own reads change neither."""
        reads = self.reads
        if reads.table is None or self._closed or self.inflight.sasl.state:
            reads.scan_requests_ok = reads.scan_responses_ok = False
            return
        reads.scan_requests_ok = not reads.draining and not self.requests.mid_frame
        if self.info is not None and self.info.awaiting_first:  # the first request's client id
            reads.scan_requests_ok = False
        reads.scan_responses_ok = not self.responses.mid_frame

    # -- upstream socket -----------------------------------------------------------
    def upstream_made(self, upstream: asyncio.Transport) -> None:
        """``dial`` connected the upstream (its ApiVersions goes out next)."""
        upstream.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        self.upstream = self.reads.upstream = upstream

    def negotiated(
        self, upstream_ranges: dict[int, VersionRange], upstream_features: FeatureReport
    ) -> None:
        """The upstream answered ApiVersions: serve the client's bytes held until now."""
        # The copy every connection to this upstream shares (this one's own goes).
        self.upstream_ranges = self.gateway.negotiated(
            self.upstream_address, upstream_ranges, upstream_features
        ).upstream
        self.upstream_features = upstream_features
        self.renegotiate()
        held, self._held = self._held, []
        self.held_size = 0
        for data in held:
            self.data_received(data)
            if self._closed:
                return
        self.flow.resume_client(HELD)

    def renegotiate(self) -> None:
        """(Re)compute what this connection may use, e.g. after finalized levels changed.

        Clients only re-read ApiVersions on a new connection; until then a version the
        new levels withhold is answered with UNSUPPORTED_VERSION, as Kafka does.
        """
        if self.upstream is None or (not self.upstream_ranges and self.ranges is None):
            return
        negotiated = self.gateway.negotiated(
            self.upstream_address, self.upstream_ranges, self.upstream_features
        )
        self.ranges, self.exchange.passthrough = negotiated.ranges, negotiated.passthrough
        self.feature_report = self.gateway.feature_report(self.upstream_features)
        self.reads.table = self.requests.table = self.responses.table = negotiated.lane
        self.scan_state()

    def upstream_data(self, data: bytes) -> None:
        """An upstream read the scanner did not take (or what was left of it)."""
        client = self.client
        if client is None:
            return
        reads = self.reads
        reads.bytes_out += len(data)
        exchange = self.exchange
        # What one read gives the client goes out in one system call (uvloop's writelines
        # is one writev). Written one by one, eight pipelined answers were
        # eight sends, which cost more than everything else the gateway did with them.
        out: list[bytes | bytearray | memoryview] = []
        for item in self.responses.feed(data):
            if isinstance(item, _BUFFERS):
                out.append(item)
            elif isinstance(item, ResponseFrame):
                handler = item.request.context
                if handler is not None:
                    # A handler may answer the client itself: what came before goes first.
                    write_all(client, out)
                    cast(InternalHandler, handler)(memoryview(item.frame)[4:])
                else:
                    out.append(dispatch.rewrite_frame(exchange, item))
            elif isinstance(item, ResponseHead):
                out.append(dispatch.rewrite_head(exchange, item))
            elif isinstance(item, ResponseTail):
                out.append(dispatch.rewrite_tail(exchange, item))
            elif isinstance(item, UnreadableResponse):
                exchange.rewrite_failed(item.request, item.detail)
            elif isinstance(item, DroppedResponse):
                self.gateway.metrics.dropped_responses.inc()
                if item.acks0:
                    continue  # a broker answering acks=0 (Tansu): expected, not logged
                limited.info(
                    "response.dropped_uncorrelated",
                    correlation_id=item.correlation_id,
                    size=item.size,
                    upstream=str(self.upstream_address),
                    **self.who(),
                )
            elif isinstance(item, ProtocolViolation):
                write_all(client, out)  # the whole responses before it still go out
                exchange.violated("upstream", item)
                return
        write_all(client, out)
        if self.requests.held and not self._closed:
            # Client bytes sent out of turn in a SASL exchange were held
            # until the broker answered; the broker has moved on, take them up again.
            self._to_upstream(self.requests.resume())
        if reads.draining:
            self.drained()
        self.scan_state()
        if reads.budget_on:
            self.budget.recharge()

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self._closed:
            # Rate-limited: garbage a client sends through makes the broker close.
            limited.info(
                "upstream.closed",
                upstream=str(self.upstream_address),
                peer=self.peer,
                in_flight=self.in_flight(),
                # A response cut off mid-frame (the client got none of a held head).
                mid_response=self.responses.mid_frame,
                error=str(exc) if exc else None,
            )
        self.close()

    # -- closing -------------------------------------------------------------------
    def drain(self) -> None:
        """Stop taking requests; close once every in-flight request was answered."""
        self.reads.draining = True
        self.reads.scan_requests_ok = False
        self.flow.pause_client(DRAINING)
        self.drained()

    def close(self, *, linger: bool = False) -> None:
        """Close both sides, flushing what is buffered; ``linger``: see ``flow.linger_close``."""
        if self._closed:
            return
        self._closed = True
        # A read that still comes takes the Python path, which knows the pair is closed.
        self.reads.scan_requests_ok = self.reads.scan_responses_ok = False
        if self.client is not None:
            linger_close(self.client) if linger else self.client.close()
        if self.upstream is not None:
            self.upstream.close()
        self._let_go()

    def abort(self) -> None:
        self._closed = True
        self.reads.scan_requests_ok = self.reads.scan_responses_ok = False
        for transport in (self.client, self.upstream):
            if transport is not None:
                transport.abort()
        self._let_go()

    def _let_go(self) -> None:
        """Free what a closed connection buffered (partial frames, bytes held for the
        handshake) now, and give the budget back what it no longer holds.

        The connection object itself outlives the close: its readers hold bound
        methods of its parts, which hold it, so it is freed by the cyclic garbage
        collector, whose full passes are rare in a gateway (few Python objects live
        long enough to trigger one). Freed only then, the partial frames of closed
        attackers stayed: about 100 MB a worker after three rounds of 60, each sending
        20 MB of a 50 MB request, on a 64 MiB budget (docs/memory.md)."""
        self.requests.discard()
        self.responses.discard()
        self._held = []
        self.held_size = 0
        if self.reads.charged:
            # What the transports still flush stays counted until connection_lost.
            self.budget.recharge()


__all__ = ["READ_BYTES", "ClientConnection", "UpstreamConnection"]
