"""One proxied connection: the client-facing and the upstream-facing asyncio protocols.

All protocol decisions are made by the sans-I/O readers in ``gateway.protocol``; this
module only moves their output between the two sockets, applies back-pressure (a side
stops reading while the other side's write buffer is above its high-water mark) and
closes both sides together.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from ..interceptors.addresses import needs_rewrite, rewrite_response
from ..observability.logging import get_logger
from ..protocol import (
    DroppedResponse,
    InFlight,
    InFlightRequest,
    ProtocolViolation,
    RequestFrame,
    RequestReader,
    ResponseFrame,
    ResponseReader,
    api_spec,
    frame,
    response_body_offset,
)

if TYPE_CHECKING:
    from ..config import HostPort
    from .app import Gateway

log = get_logger("gateway.proxy")

# Large enough that a bulk fetch streams without stop-and-go, small enough that a slow
# client cannot make the gateway hold much of a broker's output.
WRITE_BUFFER_HIGH = 4 * 1024 * 1024
WRITE_BUFFER_LOW = 1024 * 1024


def _intercept_response(entry: InFlightRequest) -> bool:
    return needs_rewrite(entry.api_key, entry.api_version)


class ClientConnection(asyncio.Protocol):
    """The client side. Owns the pair: it dials the upstream and tears both down."""

    def __init__(self, gateway: Gateway, listener: str, upstream: HostPort) -> None:
        self.gateway = gateway
        self.listener = listener
        self.upstream_address = upstream
        self.inflight = InFlight()
        self.requests = RequestReader(self.inflight, None, gateway.config.max_frame_bytes)
        self.responses = ResponseReader(
            self.inflight, _intercept_response, gateway.config.max_frame_bytes
        )
        self.client: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.peer = "?"
        # Client bytes that arrived before the upstream connection was up.
        self._pending: list[bytes | memoryview] | None = []
        self._closed = False
        self._client_paused = False
        self.draining = False

    # -- client socket -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence the cast.
        transport = cast(asyncio.Transport, transport)
        self.client = transport
        transport.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.gateway.connection_opened(self)
        asyncio.get_running_loop().create_task(self._connect_upstream())

    def data_received(self, data: bytes) -> None:
        upstream = self.upstream
        for item in self.requests.feed(data):
            if isinstance(item, bytes | memoryview):
                if upstream is not None:
                    upstream.write(item)
                elif self._pending is not None:
                    self._pending.append(bytes(item))
            elif isinstance(item, RequestFrame):
                self._forward_request(item)
            elif isinstance(item, ProtocolViolation):
                self._violation("client", item)
                return

    def eof_received(self) -> bool:
        return False  # Kafka does not half-close: close both directions.

    def connection_lost(self, exc: Exception | None) -> None:
        if self.requests.mid_frame and not self._closed:
            self.gateway.metrics.client_aborts.inc()
            log.info(
                "connection.client_aborted_mid_request", peer=self.peer, listener=self.listener
            )
        self.close()
        self.gateway.connection_closed(self)

    def pause_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.resume_reading()

    # -- upstream socket -----------------------------------------------------------
    async def _connect_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        address = self.upstream_address
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(
                    lambda: UpstreamConnection(self), address.host, address.port
                ),
                self.gateway.config.upstream_connect_timeout_s,
            )
        except (OSError, TimeoutError) as exc:
            self.gateway.metrics.upstream_connect_errors.labels(str(address)).inc()
            log.warning(
                "upstream.connect_failed",
                upstream=str(address),
                peer=self.peer,
                error=str(exc) or type(exc).__name__,
            )
            self.close()
            return
        if self._closed:
            transport.close()
            return
        transport = cast(asyncio.Transport, transport)
        transport.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        self.upstream = transport
        pending, self._pending = self._pending, None
        if pending:
            transport.writelines(pending)

    def upstream_data(self, data: bytes) -> None:
        client = self.client
        if client is None:
            return
        for item in self.responses.feed(data):
            if isinstance(item, bytes | memoryview):
                client.write(item)
            elif isinstance(item, ResponseFrame):
                client.write(self._rewrite(item))
            elif isinstance(item, DroppedResponse):
                self.gateway.metrics.dropped_responses.inc()
                log.info(
                    "response.dropped_uncorrelated",
                    correlation_id=item.correlation_id,
                    size=item.size,
                    peer=self.peer,
                    upstream=str(self.upstream_address),
                )
            elif isinstance(item, ProtocolViolation):
                self._violation("upstream", item)
                return
        if self.draining and not self.inflight:
            self.close()

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self._closed:
            log.info(
                "upstream.closed",
                upstream=str(self.upstream_address),
                peer=self.peer,
                in_flight=len(self.inflight),
                error=str(exc) if exc else None,
            )
        self.close()

    # -- shared ----------------------------------------------------------------------
    def _forward_request(self, request: RequestFrame) -> None:
        header = request.header
        self.inflight.add(header.api_key, header.api_version, header.correlation_id)
        if self.upstream is not None:
            self.upstream.write(request.frame)
        elif self._pending is not None:
            self._pending.append(request.frame)

    def _rewrite(self, response: ResponseFrame) -> bytes:
        entry = response.request
        spec = api_spec(entry.api_key)
        assert spec is not None  # only known keys are intercepted
        payload = memoryview(response.frame)[4:]
        try:
            offset = response_body_offset(payload, spec.response_header_version(entry.api_version))
            body = rewrite_response(
                entry.api_key, entry.api_version, payload[offset:], self.gateway.router
            )
        except Exception as exc:  # a broker bug must not cost the client its response
            self.gateway.metrics.rewrite_errors.labels(spec.name).inc()
            log.error(
                "response.rewrite_failed",
                api=spec.name,
                version=entry.api_version,
                error=repr(exc),
                peer=self.peer,
            )
            return response.frame
        return frame(bytes(payload[:offset]) + body)

    def _violation(self, side: str, violation: ProtocolViolation) -> None:
        self.gateway.metrics.rejected.labels(violation.reason).inc()
        log.warning(
            "connection.protocol_violation",
            side=side,
            reason=violation.reason,
            detail=violation.detail,
            peer=self.peer,
            listener=self.listener,
        )
        self.close()

    def pause_client(self) -> None:
        if self.client is not None and not self._client_paused:
            self._client_paused = True
            self.client.pause_reading()

    def resume_client(self) -> None:
        if self.client is not None and self._client_paused and not self.draining:
            self._client_paused = False
            self.client.resume_reading()

    def drain(self) -> None:
        """Stop taking requests; close once every in-flight request was answered."""
        self.draining = True
        self.pause_client()
        if not self.inflight:
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # transport.close() still flushes what is buffered, so answered requests reach
        # the client before the socket goes.
        if self.client is not None:
            self.client.close()
        if self.upstream is not None:
            self.upstream.close()

    def abort(self) -> None:
        self._closed = True
        for transport in (self.client, self.upstream):
            if transport is not None:
                transport.abort()


class UpstreamConnection(asyncio.Protocol):
    """The broker side; hands everything to its ``ClientConnection``."""

    def __init__(self, pair: ClientConnection) -> None:
        self.pair = pair

    def data_received(self, data: bytes) -> None:
        self.pair.upstream_data(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.pair.upstream_lost(exc)

    def pause_writing(self) -> None:
        self.pair.pause_client()

    def resume_writing(self) -> None:
        self.pair.resume_client()
