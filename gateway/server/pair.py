"""One proxied connection, client and upstream, without the event loop (in the manner
of h11's ``Connection``): what each read the compiled lane leaves to Python becomes.

A ``Pair`` owns the readers, the in-flight table, the client bytes held until
negotiation and what the lane may take next (``scan_state``). It takes bytes
(``data_received``, ``upstream_data``) and writes what comes of them to its sockets,
which its asyncio adapter (``proxy.ClientConnection``) sets. A reader's events become
what one table per direction says, not a switch. Its parts name a ``Protocol`` each for
what they need of it: ``reads`` (compiled: both sockets' reads, forwarding what the
scanner takes), ``exchange`` (what interceptors see; it and ``interceptors.dispatch``
know the APIs by name, the pair none), ``flow``, ``budget`` (the limits'), ``traffic``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ..client_info import ClientInfo
from ..config import HostPort
from ..features.report import NO_FEATURES, FeatureReport
from ..interceptors import dispatch
from ..interceptors.context import InternalHandler
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
from ..versions import VersionRange
from .budget import Budget
from .exchange import ConnectionExchange, limited
from .flow import DRAINING, HELD, PENDING_HIGH, Flow, linger_close, write_all
from .reads import lane
from .services import GatewayServices
from .traffic import Traffic

if TYPE_CHECKING:  # for the sockets' type only: the pair never runs asyncio
    import asyncio

# Per upstream address, whether it answers acks=0 produces (Tansu does, Kafka not), as
# the last connection to it found: a new one starts from that, not a guess (InFlight).
_acks0_answered: dict[HostPort, bool] = {}

# Items of a reader's output that are forwarded as they are. A tuple, not ``bytes |
# memoryview``: the union would be built anew at every isinstance on the hot path.
_BUFFERS = (bytes, memoryview)

Out = list[bytes | bytearray | memoryview]


class Pair:
    """A client and its upstream, and what each read the lane leaves becomes."""

    # Slots: a gateway holds tens of thousands of these (a __dict__: ~1.3 kB each).
    __slots__ = (
        "_closed",
        "_held",
        "budget",
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
        if gateway.request_log is not None:
            inflight.observer = self.reads.observer = self.traffic.log_request
        # The two sockets, also held by ``reads``: the adapter's, once made.
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
        self._held: list[bytes] = []  # client bytes that came before negotiation ended
        self.held_size = 0
        self._closed = False

    # -- from the client -----------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        """A client read the scanner did not take (or what was left of it)."""
        if self._closed:
            return  # requests that come after a drain are not read (``flow.linger_close``)
        if self.info is not None and self.info.awaiting_first:  # hook: first request's client id
            self.gateway.registry.first_read(self, data)
        reads = self.reads
        if self.ranges is None:  # held until negotiated
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
            elif _REQUEST_EVENTS[type(item)](self, item):
                return

    def _request_frame(self, item: RequestFrame) -> bool:
        try:
            dispatch.on_request(self.exchange, item)
        except Exception as exc:  # a bug must cost this connection, not the loop
            self.exchange.handler_failed(item, exc)
            return True
        return False

    def _client_violation(self, item: ProtocolViolation) -> bool:
        self.exchange.violated("client", item)
        return True

    # -- from the upstream ---------------------------------------------------------
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
        if self.client is None:
            return
        reads = self.reads
        reads.bytes_out += len(data)
        # What one read gives the client goes out in one system call (a writev): sent one
        # by one, eight pipelined answers cost more than all else done with them.
        out: Out = []
        for item in self.responses.feed(data):
            if isinstance(item, _BUFFERS):
                out.append(item)
            elif _RESPONSE_EVENTS[type(item)](self, item, out):
                return
        write_all(self.client, out)
        if self.requests.held and not self._closed:
            # Client bytes sent out of turn in a SASL exchange were held
            # until the broker answered; the broker has moved on, take them up again.
            self._to_upstream(self.requests.resume())
        if reads.draining:
            self.drained()
        self.scan_state()
        if reads.budget_on:
            self.budget.recharge()

    def _response_frame(self, item: ResponseFrame, out: Out) -> bool:
        handler = item.request.context
        if handler is None:
            rewritten = dispatch.rewrite_frame(self.exchange, item)
            if type(rewritten) is dispatch.Close:  # a response hook's verdict: the upstream's doing
                why = ProtocolViolation(rewritten.reason or "closed_by_filter", rewritten.detail)
                return self._upstream_violation(why, out)
            out.append(rewritten)  # type: ignore[arg-type]
        else:
            # A handler may answer the client itself: what came before goes first.
            write_all(self.client, out)
            cast(InternalHandler, handler)(memoryview(item.frame)[4:])
        return False

    def _response_head(self, item: ResponseHead, out: Out) -> bool:
        out.append(dispatch.rewrite_head(self.exchange, item))
        return False

    def _response_tail(self, item: ResponseTail, out: Out) -> bool:
        out.append(dispatch.rewrite_tail(self.exchange, item))
        return False

    def _unreadable(self, item: UnreadableResponse, out: Out) -> bool:
        self.exchange.rewrite_failed(item.request, item.detail)
        return False

    def _dropped(self, item: DroppedResponse, out: Out) -> bool:
        self.gateway.metrics.dropped_responses.inc()
        if not item.acks0:  # a broker answering acks=0 (Tansu): expected, not logged
            limited.info(
                "response.dropped_uncorrelated",
                correlation_id=item.correlation_id,
                size=item.size,
                upstream=str(self.upstream_address),
                **self.who(),
            )
        return False

    def _upstream_violation(self, item: ProtocolViolation, out: Out) -> bool:
        write_all(self.client, out)  # the whole responses before it still go out
        self.exchange.violated("upstream", item)
        return True

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

    # -- what the lane may take ----------------------------------------------------
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

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def draining(self) -> bool:
        return self.reads.draining

    def in_flight(self) -> int:  # requests awaiting a response
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

    # -- closing -------------------------------------------------------------------
    def client_lost(self) -> None:
        """The client's socket closed (or was closed): count an abort mid-request,
        remember what the upstream does with acks=0, and close the upstream too."""
        if self.requests.mid_frame and not self._closed:
            self.gateway.metrics.client_aborts.inc()
            limited.info(
                "connection.client_aborted_mid_request", peer=self.peer, listener=self.listener
            )
        if self.inflight.acks0_answered is not None:
            _acks0_answered[self.upstream_address] = self.inflight.acks0_answered
        self.close()

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
        """Free what a closed pair buffered (partial frames, held bytes) now, and give
        the budget back what it no longer holds. The pair outlives the close (its parts
        hold it: a cycle, freed by the rare full collections); freed only then, closed
        attackers' partial frames stayed: ~100 MB a worker after three rounds of 60,
        each sending 20 MB of a 50 MB request, on a 64 MiB budget (docs/memory.md)."""
        self.requests.discard()
        self.responses.discard()
        self._held = []
        self.held_size = 0
        if self.reads.charged:
            # What the transports still flush stays counted until connection_lost.
            self.budget.recharge()


# What each event of a reader becomes: True when the rest of that read is not sent
# (the pair closed). Keyed by exact type: no event type is subclassed.
_REQUEST_EVENTS: dict[type, Callable[[Pair, Any], bool]] = {
    RequestFrame: Pair._request_frame,
    ProtocolViolation: Pair._client_violation,
}
_RESPONSE_EVENTS: dict[type, Callable[[Pair, Any, Out], bool]] = {
    ResponseFrame: Pair._response_frame,
    ResponseHead: Pair._response_head,
    ResponseTail: Pair._response_tail,
    UnreadableResponse: Pair._unreadable,
    DroppedResponse: Pair._dropped,
    ProtocolViolation: Pair._upstream_violation,
}

__all__ = ["Pair"]
