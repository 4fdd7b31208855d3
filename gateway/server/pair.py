"""One proxied connection, client and upstream, without the event loop (in the manner
of h11's ``Connection``): what each read the compiled lane leaves to Python becomes.

A ``Pair`` owns the readers, the in-flight table, the client bytes held until
negotiation and what the lane may take next (``scan_state``). It takes bytes
(``data_received``, ``upstream_data``) and returns what comes of them: its one
``outbox.Outbox``, the bytes for each socket and whether and how both close, which the
caller sends (``reads.send``: one write call a side). It holds no socket: output made
outside a read (an answer a task made, the gateway's close) goes to the outbox too, and
the pair tells its adapter (``on_output``). A reader's event says which of the pair's
methods takes it (``protocol.Events``), so nothing switches on its type. Its parts name a
``Protocol`` each for what they need of it: ``reads`` (compiled: both sockets' reads,
forwarding what the scanner takes, and sending the outbox), ``exchange`` (what
interceptors see; it and ``interceptors.dispatch`` know the APIs by name, the pair none),
``flow`` (the one part that acts on the sockets itself: pauses), ``budget`` (the
limits'), ``traffic``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

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
from .closing import Closing, acks0_answered
from .exchange import ConnectionExchange, limited
from .flow import HELD, PENDING_HIGH, Flow
from .outbox import Outbox
from .reads import lane
from .services import GatewayServices
from .traffic import Traffic

# Items of a reader's output that are forwarded as they are. A tuple, not ``bytes |
# memoryview``: the union would be built anew at every isinstance on the hot path.
_BUFFERS = (bytes, memoryview)


class Pair(Closing):
    """A client and its upstream, and what each read the lane leaves becomes."""

    # Slots: a gateway holds tens of thousands of these (a __dict__: ~1.3 kB each).
    __slots__ = (
        "_closed",
        "_held",
        "_reading",
        "budget",
        "exchange",
        "feature_report",
        "flow",
        "gateway",
        "held_size",
        "inflight",
        "info",
        "listener",
        "on_output",
        "outbox",
        "peer",
        "peer_ip",
        "principal",
        "ranges",
        "reads",
        "requests",
        "responses",
        "tls_subject",
        "traffic",
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
        inflight.acks0_answered = acks0_answered.get(upstream)
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
        # What the sockets are to be given: returned by each read, sent by the caller.
        self.outbox = Outbox()
        # Told of output made outside a read (an answer a task made, the gateway's close):
        # the adapter sends it then (``reads.send``). None: it waits in the outbox.
        self.on_output: Callable[[Outbox], None] | None = None
        self._reading = False  # in a read, whose caller sends what it gives
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
    def data_received(self, data: bytes) -> Outbox:
        """A client read the scanner did not take (or what was left of it): what it gives
        each socket (the outbox, for the caller to send)."""
        out = self.outbox
        if self._closed:
            return out  # requests that come after a drain are not read (``outbox.linger_close``)
        reading, self._reading = self._reading, True
        try:
            if self.info is not None and self.info.awaiting_first:  # the first request's client id
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
                    out.upstream.append(data)
                else:
                    self._to_upstream(items)
                self.scan_state()
            if reads.budget_on:
                self.budget.recount()
        finally:
            self._reading = reading
        return out

    def _to_upstream(self, items: list[Item]) -> None:
        upstream = self.outbox.upstream
        for item in items:
            if isinstance(item, _BUFFERS):
                upstream.append(item)
            elif item.handled_by(self):  # type: ignore[union-attr]
                return

    # The reader's events (``protocol.Events``): each says which of these takes it.
    def request_frame(self, item: RequestFrame) -> bool:
        try:
            dispatch.on_request(self.exchange, item)
        except Exception as exc:  # a bug must cost this connection, not the loop
            self.exchange.handler_failed(item, exc)
            return True
        return False

    def violation(self, item: ProtocolViolation) -> bool:
        """Either side's: the stream cannot be followed, the pair closes (what came before
        in the read still goes out first)."""
        self.exchange.violated(item.side, item)
        return True

    # -- from the upstream ---------------------------------------------------------
    def negotiated(
        self, upstream_ranges: dict[int, VersionRange], upstream_features: FeatureReport
    ) -> None:
        """The upstream answered ApiVersions: serve the client's bytes held until now.
        What they give goes into the outbox: with the read the answer came in (its
        handler calls this), or told to the adapter (``wrote``) when called outside one."""
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
                break
        else:
            self.flow.resume_client(HELD)
        self.wrote()

    def renegotiate(self) -> None:
        """(Re)compute what this connection may use, e.g. after finalized levels changed.

        Clients only re-read ApiVersions on a new connection; until then a version the
        new levels withhold is answered with UNSUPPORTED_VERSION, as Kafka does.
        """
        if not self.upstream_ranges and self.ranges is None:  # not negotiated yet
            return
        negotiated = self.gateway.negotiated(
            self.upstream_address, self.upstream_ranges, self.upstream_features
        )
        self.ranges, self.exchange.passthrough = negotiated.ranges, negotiated.passthrough
        self.feature_report = self.gateway.feature_report(self.upstream_features)
        self.reads.table = self.requests.table = self.responses.table = negotiated.lane
        self.scan_state()

    def upstream_data(self, data: bytes) -> Outbox:
        """An upstream read the scanner did not take (or what was left of it): what it
        gives each socket (the outbox, for the caller to send)."""
        out = self.outbox
        if self._closed:
            return out
        reading, self._reading = self._reading, True
        try:
            reads = self.reads
            reads.bytes_out += len(data)
            # What one read gives the client goes out in one system call (a writev): sent
            # one by one, eight pipelined answers cost more than all else done with them.
            client = out.client
            for item in self.responses.feed(data):
                if isinstance(item, _BUFFERS):
                    client.append(item)
                elif item.handled_by(self):  # type: ignore[union-attr]
                    return out
            if self.requests.held and not self._closed:
                # Client bytes sent out of turn in a SASL exchange were held
                # until the broker answered; the broker has moved on, take them up again.
                self._to_upstream(self.requests.resume())
            if reads.draining:
                self.drained()
            self.scan_state()
            if reads.budget_on:
                self.budget.recount()
        finally:
            self._reading = reading
        return out

    def response_frame(self, item: ResponseFrame) -> bool:
        handler = item.request.context
        if handler is None:
            rewritten = dispatch.rewrite_frame(self.exchange, item)
            if type(rewritten) is dispatch.Close:  # a response hook's verdict
                if rewritten.reason is None:  # the hook said why itself
                    self.close()
                    return True
                why = ProtocolViolation(rewritten.reason, rewritten.detail, "upstream")
                return self.violation(why)
            self.outbox.client.append(rewritten)  # type: ignore[arg-type]
        else:
            # The gateway's own request: what its handler answers the client itself goes
            # into the outbox after what came before it in the read.
            cast(InternalHandler, handler)(memoryview(item.frame)[4:])
        return False

    def response_head(self, item: ResponseHead) -> bool:
        self.outbox.client.append(dispatch.rewrite_head(self.exchange, item))
        return False

    def response_tail(self, item: ResponseTail) -> bool:
        self.outbox.client.append(dispatch.rewrite_tail(self.exchange, item))
        return False

    def unreadable(self, item: UnreadableResponse) -> bool:
        self.exchange.rewrite_failed(item.request, item.detail)
        return False

    def dropped(self, item: DroppedResponse) -> bool:
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
    def draining(self) -> bool:
        return self.reads.draining

    def in_flight(self) -> int:  # requests awaiting a response
        return len(self.inflight)

    def who(self) -> dict[str, object]:
        """Who this is, for log lines: the registry's fields once it is served."""
        return self.info.log_fields() if self.info is not None else {"peer": self.peer}

    def answered_here(self) -> None:
        """A response made here is in the outbox (``exchange.answer``): a draining one
        closes once none is left, as after an upstream's; else the scanner may go on."""
        if self.reads.draining:
            self.drained()
        else:
            self.scan_state()


__all__ = ["Pair"]
