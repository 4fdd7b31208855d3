"""How a connection pair ends, and how its output made outside a read gets out: the
closing half of ``pair.Pair`` (its base), apart because it is the part the rest of the
gateway calls (the adapter's lost sockets, shutdown's drain, the limits' abort, an
interceptor's close), and the part that tells the adapter there is output (``wrote``).

Like the rest of the pair it holds no socket: a close is a word in the outbox
(``outbox.CLOSE``, ``LINGER``, ``ABORT``), sent with what came before it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import HostPort
from ..protocol import InFlight, RequestReader, ResponseReader
from .budget import Budget
from .exchange import limited
from .flow import DRAINING, Flow
from .outbox import ABORT, CLOSE, LINGER, Outbox
from .reads import lane
from .services import GatewayServices

# Per upstream address, whether it answers acks=0 produces (Tansu does, Kafka not), as
# the last connection to it found: a new one starts from that, not a guess (InFlight).
acks0_answered: dict[HostPort, bool] = {}


class Closing:
    """The pair's ending: what its sockets closing does, and closing them."""

    __slots__ = ()

    # What it uses of the pair (``pair.Pair`` sets them all).
    gateway: GatewayServices
    listener: str
    peer: str
    upstream_address: HostPort
    inflight: InFlight
    requests: RequestReader
    responses: ResponseReader
    reads: lane.Reads
    flow: Flow
    budget: Budget
    outbox: Outbox
    on_output: Callable[[Outbox], None] | None
    held_size: int
    _held: list[bytes]
    _closed: bool
    _reading: bool

    @property
    def closed(self) -> bool:
        return self._closed

    def wrote(self) -> None:
        """Output was put in the outbox. In a read, it goes with the read's; outside one
        (an answer a task made, the gateway's or a limit's close) the adapter is told."""
        if not self._reading and self.on_output is not None:
            self.on_output(self.outbox)

    def client_lost(self) -> None:
        """The client's socket closed (or was closed): count an abort mid-request,
        remember what the upstream does with acks=0, and close the upstream too."""
        if self.requests.mid_frame and not self._closed:
            self.gateway.metrics.client_aborts.inc()
            limited.info(
                "connection.client_aborted_mid_request", peer=self.peer, listener=self.listener
            )
        if self.inflight.acks0_answered is not None:
            acks0_answered[self.upstream_address] = self.inflight.acks0_answered
        self.close()

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self._closed:
            # Rate-limited: garbage a client sends through makes the broker close.
            limited.info(
                "upstream.closed",
                upstream=str(self.upstream_address),
                peer=self.peer,
                in_flight=len(self.inflight),
                # A response cut off mid-frame (the client got none of a held head).
                mid_response=self.responses.mid_frame,
                error=str(exc) if exc else None,
            )
        self.close()

    def drain(self) -> None:
        """Stop taking requests; close once every in-flight request was answered."""
        self.reads.draining = True
        self.reads.scan_requests_ok = False
        self.flow.pause_client(DRAINING)
        self.drained()

    def drained(self) -> None:
        """Draining, a read of responses went out: close once none is left."""
        if not len(self.inflight):
            self.close(linger=True)

    def close(self, *, linger: bool = False) -> None:
        """Close both sides after what they were given; ``linger``: see
        ``outbox.linger_close``."""
        if self._closed:
            return
        self._closed = True
        # A read that still comes takes the Python path, which knows the pair is closed.
        self.reads.scan_requests_ok = self.reads.scan_responses_ok = False
        self.outbox.closing = LINGER if linger else CLOSE
        self._let_go()
        self.wrote()

    def abort(self) -> None:
        """Close both sides at once, dropping what they were not given yet."""
        self._closed = True
        self.reads.scan_requests_ok = self.reads.scan_responses_ok = False
        out = self.outbox
        out.closing = ABORT
        out.client.clear()
        out.upstream.clear()
        self._let_go()
        self.wrote()

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
            # Counted again once the outbox is sent (``Reads.send``), with what the
            # sockets still flush, until connection_lost.
            self.budget.recount()


__all__ = ["Closing", "acks0_answered"]
