"""A connection's traffic as the metrics, the connection registry (/connections) and the
request log see it. One ``Traffic`` per connection, made and held by
its ``pair.Pair``."""

from __future__ import annotations

from typing import Protocol

from ..client_info import ClientInfo
from ..protocol import InFlight, InFlightRequest, RequestReader, answered_fields
from .reads import lane
from .services import GatewayServices


class Counted(Protocol):
    """What the traffic reads of its connection (``pair.Pair``)."""

    gateway: GatewayServices
    listener: str
    # None until it is served (``Gateway.connection_opened``).
    info: ClientInfo | None
    inflight: InFlight
    requests: RequestReader
    # Its compiled reads: the byte counts.
    reads: lane.Reads

    def who(self) -> dict[str, object]: ...


class Traffic:
    """Moves one connection's counts into the labelled series and the registry."""

    __slots__ = ("_conn", "_folded_in", "_folded_out")

    def __init__(self, conn: Counted) -> None:
        self._conn = conn
        # Byte counts already folded into the Prometheus counters.
        self._folded_in = 0
        self._folded_out = 0

    def fold(self) -> None:
        """Move this connection's counts into the labelled Prometheus series."""
        conn = self._conn
        info = conn.info
        if info is None:
            return
        stats = conn.inflight.fold()
        self.sync()
        reads = conn.reads
        bytes_in = reads.bytes_in - self._folded_in
        bytes_out = reads.bytes_out - self._folded_out
        self._folded_in, self._folded_out = reads.bytes_in, reads.bytes_out
        conn.gateway.metrics.traffic.fold((conn.listener, *info.labels), stats, bytes_in, bytes_out)
        info.used(stats)  # the versions its identity used (gateway.client_records)

    def sync(self) -> None:
        """Bring the registry's counts for this connection (/connections) up to date."""
        conn = self._conn
        info = conn.info
        if info is not None:
            info.requests = conn.requests.frames
            reads = conn.reads
            info.bytes_in, info.bytes_out = reads.bytes_in, reads.bytes_out

    def log_request(self, entry: InFlightRequest) -> None:
        """The in-flight table's observer (with a request log): each answered request."""
        conn = self._conn
        request_log = conn.gateway.request_log
        if request_log is None or entry.context is not None or not request_log.sampled():
            return
        request_log.emit(
            "request.completed", **answered_fields(entry), listener=conn.listener, **conn.who()
        )
