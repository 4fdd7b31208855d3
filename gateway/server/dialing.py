"""The upstream side of a connection: dialling it (``dial``, which ``ClientConnection``
starts once it serves a client) and its socket's protocol (``UpstreamConnection``)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable
from typing import Protocol, cast

from ..config import HostPort
from ..features.report import FeatureReport
from ..interceptors import dispatch
from ..interceptors.context import Exchange
from ..observability.logging import get_logger
from ..versions import VersionRange
from .flow import BACKPRESSURE, Flow
from .reads import lane
from .services import GatewayServices

log = get_logger("gateway.proxy")


class Paired(Protocol):
    """What the upstream's protocol hands on to (``proxy.ClientConnection``)."""

    # Its compiled reads: the upstream's reads go there.
    reads: lane.Reads
    # Its pauses: the upstream's write buffer pauses the client's reading.
    flow: Flow

    def upstream_lost(self, exc: Exception | None) -> None: ...


class Dialled(Paired, Protocol):
    """What ``dial`` reads and tells of the connection it dials for."""

    gateway: GatewayServices
    peer: str
    # Where it dials; ``dial`` moves it to the SNI lookup's answer or the next fallback.
    upstream_address: HostPort
    exchange: Exchange

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...
    def upstream_made(self, upstream: asyncio.Transport) -> None: ...
    def negotiated(
        self, upstream_ranges: dict[int, VersionRange], upstream_features: FeatureReport
    ) -> None: ...


async def dial(
    conn: Dialled, fallbacks: Iterable[HostPort] = (), unknown_node: int | None = None
) -> None:
    """Connect ``conn`` to its upstream, then to each of ``fallbacks`` in turn while
    none can be reached, and ask it ApiVersions on the connection's own behalf: its
    answer goes to ``conn.negotiated``. ``unknown_node``: SNI named a broker no Metadata
    has named yet, looked up first. Closes ``conn`` when no upstream can be had."""
    gw = conn.gateway
    if unknown_node is not None and gw.sni is not None:
        found = await gw.sni.look_up(unknown_node, conn.peer)
        if found is None or conn.closed:
            conn.close()
            return
        conn.upstream_address = found
    others = iter(fallbacks)
    while True:
        upstream = await _connect(conn, conn.upstream_address)
        if upstream is not None:
            break
        following = next(others, None)
        if following is None or conn.closed:
            conn.close()
            return
        conn.upstream_address = following
    if conn.closed:
        upstream.close()
        return
    conn.upstream_made(upstream)
    dispatch.ask_upstream_versions(conn.exchange, conn.negotiated)


async def _connect(conn: Dialled, address: HostPort) -> asyncio.Transport | None:
    """A transport to ``address`` (TLS if the upstream wants it), or None (logged)."""
    gw = conn.gateway
    server_hostname = gw.upstream_server_hostname(address)
    try:
        transport, _ = await asyncio.wait_for(
            asyncio.get_running_loop().create_connection(
                functools.partial(UpstreamConnection, conn),
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
            peer=conn.peer,
            error=str(exc) or type(exc).__name__,
            **({"tls_server_hostname": server_hostname} if gw.upstream_tls else {}),
        )
        return None
    # uvloop's transports do not subclass asyncio.Transport, hence the cast.
    return cast(asyncio.Transport, transport)


class UpstreamConnection(asyncio.BufferedProtocol):
    """The broker side's protocol: its reads go to its pair's reads, the rest to the
    pair (``ClientConnection``)."""

    __slots__ = ("buffer_updated", "pair")

    get_buffer = staticmethod(lane.get_buffer)

    def __init__(self, pair: Paired) -> None:
        self.pair = pair
        # uvloop takes a protocol's buffer_updated once, when the transport is made:
        # the compiled reads' own method, so a read runs no Python frame here.
        self.buffer_updated = pair.reads.upstream_read

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.pair.upstream_lost(exc)

    def pause_writing(self) -> None:
        self.pair.flow.pause_client(BACKPRESSURE)

    def resume_writing(self) -> None:
        self.pair.flow.resume_client(BACKPRESSURE)
