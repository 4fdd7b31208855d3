"""What an interceptor may know and do about the connection it handles a frame of.

Interceptors (``gateway.interceptors.dispatch``) see a connection only through
``Exchange`` and the gateway only through ``GatewayView``: the negotiated versions, the
feature gate, the principal, SASL login and peer, metrics, and the few actions that
touch the wire (answer locally, forward a held-back request, ask the upstream, close).
Hooks only read it: what they decide, ``gateway.interceptors.verdicts`` does with these
actions.
``gateway.server.exchange.ConnectionExchange`` (a part of each connection) and
``gateway.server.app.Gateway`` satisfy them structurally, so nothing here imports the
server layer.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol

from ..client_info import ClientInfo
from ..clients import ConnectionRegistry
from ..config import Config, HostPort
from ..features.catalogue import Catalogue
from ..features.report import FeatureReport
from ..features.validation import FeatureUpdate, UpdateResult
from ..features.znode import Finalized
from ..observability.metrics import Metrics
from ..protocol import InFlightRequest, RequestFrame, SaslLogin
from ..versions import BrokerSoftware, VersionRange
from .api_versions import SoftwareTags
from .endpoints import AddressBook

# Called with the payload (no length prefix) of the response to an internal request.
InternalHandler = Callable[[memoryview], None]


class FeatureView(Protocol):
    """The gateway's feature gate (``gateway.server.features.FeatureGate``)."""

    enabled: bool
    catalogue: Catalogue
    finalized: Finalized
    caps: dict[int, int]

    @property
    def supported(self) -> Mapping[str, tuple[int, int]] | None: ...

    def caps_for(self, upstream: FeatureReport) -> dict[int, int]: ...

    async def apply_updates(
        self,
        updates: Sequence[FeatureUpdate],
        *,
        validate_only: bool,
        all_or_nothing: bool,
        who: dict[str, object],
        timeout_s: float = 30.0,
    ) -> tuple[list[UpdateResult], int, str | None]: ...


class GatewayView(Protocol):
    """The gateway-wide state interceptors read (``gateway.server.app.Gateway``)."""

    config: Config
    metrics: Metrics
    features: FeatureView
    router: AddressBook
    registry: ConnectionRegistry
    software_tags: SoftwareTags

    def own_range(self, api_key: int) -> VersionRange | None: ...
    def broker_software(self, address: HostPort) -> BrokerSoftware: ...
    def broker_software_of(self, node_id: int) -> BrokerSoftware | None: ...
    def update_features_allowed(self, peer: str) -> bool: ...
    def synthesizes_describe_cluster(self, upstream: dict[int, VersionRange]) -> bool: ...


class Exchange(Protocol):
    """One client connection as interceptors see it."""

    gateway: GatewayView
    listener: str
    peer: str
    # "User:..." as Kafka names the connection: the SASL login the broker accepted,
    # else the verified client certificate's (gateway.server.logins); None: neither.
    principal: str | None
    tls_subject: str | None
    # The connection's SASL logins, from its first SaslHandshake on; None before.
    sasl_login: SaslLogin | None
    info: ClientInfo | None
    upstream_address: HostPort
    # Negotiated ranges (None until the upstream answered ApiVersions) and the upstream's.
    ranges: dict[int, VersionRange] | None
    upstream_ranges: dict[int, VersionRange]
    # The features the upstream reported, and what clients of this connection are told:
    # the gateway's merged with the upstream's (gateway.features.report).
    upstream_features: FeatureReport
    feature_report: FeatureReport

    @property
    def closed(self) -> bool: ...

    def answer(self, entry: InFlightRequest, payload: bytes) -> None:
        """Send a gateway-made response (payload without length prefix) in its turn."""

    def forward(self, request: RequestFrame) -> None:
        """Send a held-back request upstream exactly as it came (an observed one)."""

    def ask_upstream(
        self,
        api_key: int,
        build: Callable[[int], tuple[int, bytes]],
        handler: InternalHandler,
    ) -> int:
        """Send the gateway's own request upstream: ``build(correlation_id)`` gives
        (version, whole frame). ``handler`` gets its response instead of the client;
        returns the version sent."""

    def send_unanswered(self, entry: InFlightRequest, request: bytes) -> None:
        """Send ``request`` (a whole frame Kafka does not answer: an acks=0 produce)
        upstream in place of the client's ``entry``, which then awaits nothing."""

    def violation(self, side: str, reason: str, detail: str) -> None:
        """Log and count a protocol violation by ``side`` and close the connection."""

    def rewrite_failed(self, entry: InFlightRequest, error: str) -> None:
        """Log and count a response that could not be rewritten."""

    def close(self) -> None: ...
    def who(self) -> dict[str, object]: ...
    def fold_stats(self) -> None: ...
    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` on the connection's loop (an answer that waits on ZooKeeper)."""
