"""What a connection uses of the gateway that holds it: a ``Protocol``, not ``Gateway``.

``gateway.server.app`` builds connections (``proxy.ClientConnection``), so the
connection naming ``Gateway`` back would close an import circle; it names this instead,
which ``Gateway`` satisfies structurally. The part interceptors may read is
``gateway.interceptors.context.GatewayView``; this adds what only the server layer
needs: connection bookkeeping, limits, TLS and SNI routing, the request log.
"""

from __future__ import annotations

import ssl
from typing import NamedTuple, Protocol

from ..client_info import ClientInfo
from ..config import HostPort
from ..features.report import FeatureReport
from ..interceptors.context import GatewayView
from ..observability.logging import RequestLog
from ..versions import VersionRange
from .limits import ConnectionLimits, Limited
from .sni import SniRouter


class Folding(Protocol):
    """A connection's counts for the metrics and /connections (``traffic.Traffic``)."""

    def fold(self) -> None: ...
    def sync(self) -> None: ...


class Connection(Protocol):
    """What the gateway's connection bookkeeping reads of a connection."""

    peer: str
    listener: str
    info: ClientInfo | None
    # What the limits count of it (``budget.Budget``), and its counts.
    budget: Limited
    traffic: Folding


class GatewayServices(GatewayView, Protocol):
    limits: ConnectionLimits
    sni: SniRouter | None
    request_log: RequestLog | None
    # None: plaintext towards the upstream.
    upstream_tls: ssl.SSLContext | None

    def connection_opened(self, conn: Connection) -> ClientInfo: ...
    def connection_closed(self, conn: Connection) -> None: ...
    def upstream_server_hostname(self, address: HostPort) -> str | None: ...
    def negotiated(
        self,
        address: HostPort,
        upstream: dict[int, VersionRange],
        upstream_features: FeatureReport = ...,
    ) -> Negotiated: ...
    def feature_report(self, upstream_features: FeatureReport) -> FeatureReport: ...


class Negotiated(NamedTuple):
    """What connections to one upstream may use, shared by all of them (read-only)."""

    upstream: dict[int, VersionRange]  # what the upstream advertised
    available: dict[int, VersionRange]  # own ∩ upstream: what the feature gate is told
    ranges: dict[int, VersionRange]  # what clients are told: own ∩ upstream ∩ caps
    passthrough: dict[int, VersionRange]  # ranges minus the keys answered here
    lane: object  # what the compiled lane may take of it (protocol.PlainTable)
