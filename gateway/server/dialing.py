"""The upstream side of a connection: its protocol (``UpstreamConnection``), and how
``ClientConnection`` dials it and learns what it may use (a mixin of it)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from ..features.report import FeatureReport
from ..interceptors import dispatch
from ..observability.logging import get_logger
from .flow import BACKPRESSURE, HELD, WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW
from .reads import lane

if TYPE_CHECKING:
    from ..config import HostPort
    from ..protocol import PlainTable, RequestReader, ResponseReader
    from ..versions import VersionRange
    from .services import GatewayServices

log = get_logger("gateway.proxy")


class UpstreamDialing:
    """``ClientConnection``'s dialling of its upstream and negotiation with it."""

    __slots__ = ()

    if TYPE_CHECKING:
        gateway: GatewayServices
        upstream_address: HostPort
        upstream: asyncio.Transport | None
        upstream_ranges: dict[int, VersionRange]
        upstream_features: FeatureReport
        feature_report: FeatureReport
        ranges: dict[int, VersionRange] | None
        requests: RequestReader
        responses: ResponseReader
        table: PlainTable | None
        peer: str
        _closed: bool
        _fallbacks: list[HostPort]
        _unknown_node: int | None
        _held: list[bytes]
        _held_size: int
        _passthrough: dict[int, VersionRange]

        def close(self) -> None: ...
        def data_received(self, data: bytes) -> None: ...
        def resume_client(self, reason: int) -> None: ...
        def _scan_state(self) -> None: ...

    async def _connect_upstream(self) -> None:
        sni = self.gateway.sni
        if self._unknown_node is not None and sni is not None:
            found = await sni.look_up(self._unknown_node, self.peer)
            self._unknown_node = None
            if found is None or self._closed:
                self.close()
                return
            self.upstream_address = found
        loop = asyncio.get_running_loop()
        address = self.upstream_address
        gw = self.gateway
        server_hostname = gw.upstream_server_hostname(address)
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(
                    lambda: UpstreamConnection(cast(Any, self)),
                    address.host,
                    address.port,
                    ssl=gw.upstream_tls,
                    server_hostname=server_hostname,
                ),
                gw.config.upstream_connect_timeout_s,
            )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError (a failed handshake) included
            gw.metrics.upstream_connect_errors.labels(str(address)).inc()
            log.warning(
                "upstream.connect_failed",
                upstream=str(address),
                peer=self.peer,
                error=str(exc) or type(exc).__name__,
                **({"tls_server_hostname": server_hostname} if gw.upstream_tls else {}),
            )
            if self._fallbacks and not self._closed:
                self.upstream_address = self._fallbacks.pop(0)
                await self._connect_upstream()
                return
            self.close()
            return
        upstream = cast(asyncio.Transport, transport)
        if self._closed:
            upstream.close()
            return
        upstream.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        self.upstream = upstream
        dispatch.ask_upstream_versions(self, self._negotiated)

    def _negotiated(
        self, upstream_ranges: dict[int, VersionRange], upstream_features: FeatureReport
    ) -> None:
        # The copy every connection to this upstream shares (this one's own goes).
        self.upstream_ranges = self.gateway.negotiated(
            self.upstream_address, upstream_ranges, upstream_features
        ).upstream
        self.upstream_features = upstream_features
        self.renegotiate()
        held, self._held = self._held, []
        self._held_size = 0
        for data in held:
            self.data_received(data)
            if self._closed:
                return
        self.resume_client(HELD)

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
        self.ranges, self._passthrough = negotiated.ranges, negotiated.passthrough
        self.feature_report = self.gateway.feature_report(self.upstream_features)
        self.table = self.requests.table = self.responses.table = negotiated.lane
        self._scan_state()


class UpstreamConnection(lane.UpstreamReads, asyncio.BufferedProtocol):  # type: ignore[misc,name-defined]
    """The broker side; hands everything to its ``ClientConnection`` (its reads through
    ``lane.UpstreamReads``)."""

    __slots__ = ()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.pair.upstream_lost(exc)

    def pause_writing(self) -> None:
        self.pair.pause_client(BACKPRESSURE)

    def resume_writing(self) -> None:
        self.pair.resume_client(BACKPRESSURE)
