"""One proxied connection: the client-facing asyncio protocol, which owns the pair.

All protocol decisions are made by the sans-I/O readers in ``gateway.protocol``, the
scanner they call first, and the interceptors; this module only moves their output
between the two sockets, applies back-pressure (``flow``) and closes both sides
together. Its other sides are mixins: what interceptors see (``exchange``), the
upstream's dialling (``dialing``) and what the limits see (``budget``).

The connection knows no API by name. Interceptors registered by API key
(``gateway.interceptors.dispatch``) decide: the connection's pass-through table (the
negotiated ranges minus the keys answered here) forwards a request after one dict lookup;
a request it holds back goes to ``dispatch.on_request``, which answers it locally
(ApiVersions, UpdateFeatures, a synthesized DescribeCluster) or rejects it as Kafka would;
a response whose key asked for it comes back rewritten from ``dispatch.rewrite_*``.
Interceptors see this class only as ``gateway.interceptors.context.Exchange``.

Life of a connection: the client connects → the gateway dials the upstream and asks it
ApiVersions on its own behalf → once the answer is in, the client's bytes (held until
then) are read and take the way above.
"""

from __future__ import annotations

import asyncio
from typing import cast

from ..clients import ClientInfo
from ..config import HostPort
from ..features.report import NO_FEATURES
from ..interceptors import dispatch
from ..interceptors.context import InternalHandler
from ..observability.logging import get_logger
from ..principal import cached_rules, principal_of
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
from ..protocol import _scanner as protocol_scanner
from ..versions import VersionRange
from . import allocator
from .budget import LimitsTarget
from .dialing import UpstreamConnection, UpstreamDialing
from .exchange import InterceptorExchange, limited
from .flow import (
    BACKPRESSURE,
    DRAINING,
    HELD,
    PENDING_HIGH,
    SLICE,
    THROTTLED,
    WRITE_BUFFER_HIGH,
    WRITE_BUFFER_LOW,
    Pauses,
)
from .reads import lane
from .services import GatewayServices
from .tls import peer_subject

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

# The most one socket read takes, and the unit of work a busy connection side gets per
# turn of the event loop. libuv reads a readable socket again and again in one turn (up
# to 32 times) for as long as each read fills the buffer, so four clients streaming a
# 4.2 MB Metadata response held the loop for up to 10 ms at a time while every other
# connection waited (event-loop lag). A side whose read filled the buffer
# therefore pauses reading and resumes on the loop's next turn (a read that did not
# fill it ends that socket's turn by itself). uvloop reads 256 kB at once into a buffer
# of its own and copies it out; both sides are BufferedProtocols reading into _RECV
# instead, for a smaller unit: four connections streaming 100k-partition Metadata, the
# gateway on a CPU of its own (metadata_bench --proxy-cpus 1), had lag p99 1-5 ms with
# 256 kB reads and <= 0.5 ms with 120 kB, at about the same CPU per response. 64 kB
# cost 30 % more CPU per response (twice the reads, sends and yields) for no less lag.
READ_BYTES = lane.READ_BYTES
# One receive buffer for every connection of the process: a read is copied out of it
# into ``bytes`` before the next one can start (as uvloop copies out of its own), so no
# connection keeps a buffer of its own. The gateway runs one event loop per process
# (workers are processes), so this is also one buffer per loop, as uvloop's is.
_RECV = lane.RECV
# What the scanner may take of a negotiation's pass-through table (Gateway.negotiated).
PlainTable = protocol_scanner.PlainTable

# Items of a reader's output that are forwarded as they are. A tuple, not ``bytes |
# memoryview``: the union would be built anew at every isinstance on the hot path.
_BUFFERS = (bytes, memoryview)


def _send(transport: asyncio.Transport, out: list[bytes | bytearray | memoryview]) -> None:
    """Write ``out`` in one call (one system call when the socket takes it all); empty it."""
    if len(out) == 1:
        transport.write(out[0])
    elif out:
        transport.writelines(out)
    else:
        return
    out.clear()


class ClientConnection(  # type: ignore[misc]
    lane.Reads, InterceptorExchange, UpstreamDialing, LimitsTarget, asyncio.BufferedProtocol
):
    """The client side. Owns the pair: it dials the upstream and tears both down.

    Composes the two readers, the in-flight table they share and the limits; each read
    goes to the scanner first (``reads.lane.Reads``), what it leaves to its reader, and
    what comes out to the other socket."""

    # Slots, not a __dict__: a gateway holds tens of thousands of these (a dict of this
    # many attributes is ~1.3 kB a connection; docs/hot-path.md).
    __slots__ = (
        "_client_pauses",
        "_closed",
        "_fallbacks",
        "_first_done",
        "_folded_in",
        "_folded_out",
        "_held",
        "_held_size",
        "_passthrough",
        "_throttle",
        "_unknown_node",
        "_upstream_pauses",
        "counted",
        "feature_report",
        "gateway",
        "info",
        "listener",
        "opened_at",
        "peer",
        "peer_ip",
        "principal",
        "ranges",
        "requests",
        "responses",
        "tls_subject",
        "upstream_address",
        "upstream_features",
        "upstream_ranges",
    )

    def __init__(self, gateway: GatewayServices, listener: str, upstream: HostPort) -> None:
        self.gateway = gateway
        self.listener = listener
        self.upstream_address = upstream
        self.inflight = InFlight()
        self.inflight.acks0_answered = _acks0_answered.get(upstream)
        self.requests = RequestReader(
            self.inflight, self._intercept_request, gateway.config.max_frame_bytes
        )
        self.responses = ResponseReader(
            self.inflight,
            dispatch.intercepts_response,
            gateway.config.max_frame_bytes,
            dispatch.stream_policy,
        )
        self.client: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.bytes_in = self.bytes_out = 0  # request bytes in, response bytes out
        self.info: ClientInfo | None = None
        self.peer = "?"
        self.tls_subject: str | None = None
        # Other upstreams to try, in order, when upstream_address cannot be reached.
        self._fallbacks: list[HostPort] = []
        # SNI named a broker no Metadata has named yet: look it up before dialling.
        self._unknown_node: int | None = None
        # "User:..." from the verified client certificate (ssl.principal.mapping.rules);
        # None without one. SASL principals are the broker's: the gateway never sees them.
        self.principal: str | None = None
        # Negotiated ranges; None until the upstream answered ApiVersions.
        self.ranges: dict[int, VersionRange] | None = None
        self.upstream_ranges: dict[int, VersionRange] = {}
        # The features the upstream reported, and what clients are told (both merged).
        self.upstream_features = NO_FEATURES
        self.feature_report = NO_FEATURES
        self._passthrough: dict[int, VersionRange] = {}
        # Client bytes that arrived before negotiation finished.
        self._held: list[bytes] = []
        self._held_size = 0
        self._closed = False
        # Reasons (bits above) each side's reading is paused.
        self._client_pauses = Pauses()
        self._upstream_pauses = Pauses()
        self.draining = False
        # Byte counts already folded into the Prometheus counters.
        self._folded_in = 0
        self._folded_out = 0
        self.observer = None
        if gateway.request_log is not None:
            self.inflight.observer = self.observer = self._log_request
        # Connection limits (gateway/server/limits.py).
        self.peer_ip = "?"
        self.opened_at = 0.0
        self.charged = 0  # bytes counted against queued_max_request_bytes
        self.partial = 0  # of ``charged``: partial frames (see ``recharge_writes``)
        self.limits = gateway.limits
        self.budget_on = bool(gateway.limits.budget)
        # What the scanner may take: nothing until the upstream's versions are known.
        self.table = None
        self.entries = self.inflight.entries
        self.counts = self.inflight.counts
        self.max_frame_bytes = gateway.config.max_frame_bytes
        self.scan_requests_ok = self.scan_responses_ok = False
        self._first_done = False
        self.counted = False  # in the caps' counts (ConnectionLimits.admit/release)
        # The pending start of a connection held by the creation-rate throttle.
        self._throttle: asyncio.TimerHandle | None = None

    # -- client socket -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence the cast.
        client = cast(asyncio.Transport, transport)
        self.client = client
        client.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        peer = client.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.peer_ip = peer[0] if peer else "?"
        limits = self.gateway.limits
        if limits.admit(self) is not None:
            self._closed = True  # over a cap: closed at accept, as Kafka's acceptor does
            client.abort()
            return
        delay = limits.creation_delay(self)
        if delay is None:  # over the creation rate for longer than it may wait: closed
            self._closed = True
            client.abort()
            return
        if delay > 0:
            # Over max_connection_creation_rate: Kafka's acceptor waits before taking
            # the connection; the kernel has taken it here, so it is held unread (its
            # bytes wait in the socket) until its token is due.
            self.pause_client(THROTTLED)
            self._throttle = asyncio.get_running_loop().call_later(delay, self._serve)
            return
        self._serve()

    def _serve(self) -> None:
        """Start serving an accepted connection (at once, or after its throttle)."""
        client = self.client
        assert client is not None
        if self._throttle is not None:
            self._throttle = None
            if self._closed:
                return
            self.resume_client(THROTTLED)
        self.opened_at = self.gateway.limits.clock()
        ssl_object = client.get_extra_info("ssl_object")
        # The verified client certificate (TLS with client auth); for log lines.
        self.tls_subject = peer_subject(ssl_object)
        if ssl_object is not None:
            rules = cached_rules(self.gateway.config.tls_principal_mapping_rules)
            self.principal = principal_of(rules, ssl_object.getpeercert())
        if self.gateway.sni is not None:
            # One port for every broker: the handshake's server name chose the broker.
            route = self.gateway.sni.routed(ssl_object)
            if route is None:  # the handshake refuses unroutable names; never here
                client.abort()
                return
            self.listener, self.upstream_address = route.listener, route.upstream
            self._fallbacks = list(route.fallbacks)
            self._unknown_node = route.unknown_node
        self.info = self.gateway.connection_opened(self)
        asyncio.get_running_loop().create_task(self._connect_upstream())

    def read_filled_client(self) -> None:
        """A client read filled the buffer: libuv would read this socket again in this
        turn; the loop's other work goes first (READ_BYTES)."""
        self.pause_client(SLICE)
        asyncio.get_running_loop().call_soon(self.resume_client, SLICE)

    def data_received(self, data: bytes) -> None:
        """A client read the scanner did not take (or what was left of it)."""
        if self.info is not None and self.info.awaiting_first:  # hook: first request's client id
            self.gateway.registry.first_read(self, data)
        if self.ranges is None:
            self._held.append(data)
            self._held_size += len(data)
            if self._held_size > PENDING_HIGH:
                self.pause_client(HELD)
        else:
            self.bytes_in += len(data)
            items = self.requests.feed(data)
            if len(items) == 1 and items[0] is data:  # forwarded whole, the commonest
                self.upstream.write(data)  # type: ignore[union-attr]
            else:
                self._to_upstream(items)
            self._scan_state()
        if self.budget_on:
            self._recharge()

    def _to_upstream(self, items: list[Item]) -> None:
        upstream = self.upstream
        assert upstream is not None  # ranges are only known once upstream is connected
        for item in items:
            if isinstance(item, _BUFFERS):
                upstream.write(item)
            elif isinstance(item, RequestFrame):
                try:
                    dispatch.on_request(self, item)
                except Exception as exc:  # a bug must cost this connection, not the loop
                    self._handler_failed(item, exc)
                    return
            elif isinstance(item, ProtocolViolation):
                self._violation("client", item)
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
        self.pause_upstream(BACKPRESSURE)

    def resume_writing(self) -> None:
        self.resume_upstream(BACKPRESSURE)

    def in_flight(self) -> int:
        """Requests awaiting a response."""
        return len(self.inflight)

    def drained(self) -> None:
        """Draining, the scanner took a read of responses: close once none is left."""
        if not self.in_flight():
            self.close()

    def _scan_state(self) -> None:
        """Say which reads the scanner may take next, after the Python path read: a
        side's, when its reader is between frames and no SASL exchange is on (raw
        tokens are no frames to scan). The scanner's own reads change neither."""
        if self.table is None or self._closed or self.inflight.sasl.state:
            self.scan_requests_ok = self.scan_responses_ok = False
            return
        self.scan_requests_ok = not self.draining and not self.requests.mid_frame
        if self.info is not None and self.info.awaiting_first:  # hook: first request to Python
            self.scan_requests_ok = False
        self.scan_responses_ok = not self.responses.mid_frame

    # -- upstream socket -----------------------------------------------------------
    def upstream_data(self, data: bytes) -> None:
        """An upstream read."""
        client = self.client
        if client is None:
            return
        self.bytes_out += len(data)
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
                    _send(client, out)
                    cast(InternalHandler, handler)(memoryview(item.frame)[4:])
                else:
                    out.append(dispatch.rewrite_frame(self, item))
            elif isinstance(item, ResponseHead):
                out.append(dispatch.rewrite_head(self, item))
            elif isinstance(item, ResponseTail):
                out.append(dispatch.rewrite_tail(self, item))
            elif isinstance(item, UnreadableResponse):
                self.rewrite_failed(item.request, item.detail)
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
                _send(client, out)  # the whole responses before it still go out
                self._violation("upstream", item)
                return
        _send(client, out)
        if self.requests.held and not self._closed:
            # Client bytes sent out of turn in a SASL exchange were held
            # until the broker answered; the broker has moved on, take them up again.
            self._to_upstream(self.requests.resume())
        if self.draining and not self.in_flight():
            self.close()
        self._scan_state()
        if self.budget_on:
            self._recharge()

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

    def pause_client(self, reason: int) -> None:
        self._client_pauses.pause(self.client, reason)

    def resume_client(self, reason: int) -> None:
        self._client_pauses.resume(self.client, reason, self._closed)

    def read_filled_upstream(self) -> None:
        """An upstream read filled the buffer (see ``read_filled_client``)."""
        self.pause_upstream(SLICE)
        asyncio.get_running_loop().call_soon(self.resume_upstream, SLICE)

    def pause_upstream(self, reason: int) -> None:
        self._upstream_pauses.pause(self.upstream, reason)

    def resume_upstream(self, reason: int) -> None:
        self._upstream_pauses.resume(self.upstream, reason, self._closed)

    def drain(self) -> None:
        """Stop taking requests; close once every in-flight request was answered."""
        self.draining = True
        self.scan_requests_ok = False
        self.pause_client(DRAINING)
        if not self.in_flight():
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # A read that still comes takes the Python path, which knows the pair is closed.
        self.scan_requests_ok = self.scan_responses_ok = False
        # transport.close() still flushes what is buffered, so answered requests reach
        # the client before the socket goes.
        if self.client is not None:
            self.client.close()
        if self.upstream is not None:
            self.upstream.close()
        self._let_go()

    def abort(self) -> None:
        self._closed = True
        self.scan_requests_ok = self.scan_responses_ok = False
        for transport in (self.client, self.upstream):
            if transport is not None:
                transport.abort()
        self._let_go()

    def _let_go(self) -> None:
        """Free what a closed connection buffered (partial frames, bytes held for the
        handshake) now, and give the budget back what it no longer holds.

        The connection object itself outlives the close: its readers hold bound
        methods of it, so it is freed by the cyclic garbage collector, whose full
        passes are rare in a gateway (few Python objects live long enough to trigger
        one). Freed only then, the partial frames of closed attackers stayed: about
        100 MB a worker after three rounds of 60, each sending 20 MB of a 50 MB
        request, on a 64 MiB budget (docs/memory.md)."""
        self.requests.discard()
        self.responses.discard()
        self._held = []
        self._held_size = 0
        if self.charged:
            # What the transports still flush stays counted until connection_lost.
            self._recharge()


__all__ = ["READ_BYTES", "ClientConnection", "PlainTable", "UpstreamConnection"]
