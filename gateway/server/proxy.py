"""One proxied connection's asyncio side: the adapter from the event loop's callbacks to
its ``pair.Pair``, in the manner of uvicorn's ``h11_impl``.

The pair (``gateway/server/pair.py``, no asyncio, no socket) owns the readers, the
in-flight table and what the compiled lane may take, and decides what every read
becomes: it returns what to send to each socket and whether and how to close them (its
``outbox.Outbox``). This module is what needs the loop: accepting the client (the
limits' verdict, the creation-rate throttle, TLS identity and SNI route), starting
``dialing.dial``, giving the two transports to the pair's ``reads`` (which send what a
read gives, and the outbox the pair fills outside a read: ``on_output``), and handing
on the loop's callbacks (reads go to the compiled ``reads``; lost sockets, write-buffer
pauses and resumes to the pair and its ``flow``).

Life of a connection: the client connects → the gateway dials the upstream and asks it
ApiVersions on its own behalf → once the answer is in, the client's bytes (held until
then) are read and take the way the pair describes.
"""

from __future__ import annotations

import asyncio
from typing import cast

from ..config import HostPort
from ..tls import client_identity
from . import allocator
from .dialing import UpstreamConnection, dial
from .flow import BACKPRESSURE, THROTTLED, WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW
from .pair import Pair
from .reads import READ_BYTES, lane
from .reads import RECV as _RECV  # noqa: F401  (tests and the bench fill it)
from .services import GatewayServices

# Large buffers (a partial frame of up to max_frame_bytes) go back to the system when
# freed, not to the heap (allocator.py): every process that serves connections imports
# this module before its first one (the workers' fork server among them, whose setting
# each forked worker inherits).
allocator.pin_mmap_threshold()


class ClientConnection(Pair, asyncio.BufferedProtocol):
    """The client socket's protocol, and the pair it serves: it dials the upstream and
    hands the loop's callbacks on; a read goes to the scanner first (``reads``), what it
    leaves to the pair (``data_received``, ``upstream_data``)."""

    __slots__ = ("_throttle", "buffer_updated")

    get_buffer = staticmethod(lane.get_buffer)

    def __init__(self, gateway: GatewayServices, listener: str, upstream: HostPort) -> None:
        Pair.__init__(self, gateway, listener, upstream)
        # uvloop takes a protocol's buffer_updated once, when the transport is made: the
        # compiled reads' own method, so a read runs no Python frame here.
        self.buffer_updated = self.reads.client_read
        # What the pair gives outside a read (an answer a task made, a close from the
        # gateway or a limit) goes out at once, as a read's does.
        self.on_output = self.reads.send
        # The pending start of a connection held by the creation-rate throttle.
        self._throttle: asyncio.TimerHandle | None = None

    # -- client socket -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence the cast.
        client = cast(asyncio.Transport, transport)
        self._client_made(client)
        peer = client.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.peer_ip = peer[0] if peer else "?"
        delay = self.gateway.limits.accept(self.budget)
        if delay is None:  # over a cap or the creation rate: closed at accept, as in Kafka
            self._closed = True
            client.abort()
            return
        if delay > 0:
            # Over max_connection_creation_rate: Kafka's acceptor waits before taking
            # the connection; the kernel has taken it here, so it is held unread (its
            # bytes wait in the socket) until its token is due.
            self.flow.pause_client(THROTTLED)
            self._throttle = asyncio.get_running_loop().call_later(delay, self._serve)
            return
        self._serve()

    def _client_made(self, client: asyncio.Transport) -> None:
        client.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        self.reads.client = client

    def _serve(self) -> None:
        """Start serving an accepted connection (at once, or after its throttle)."""
        client = self.reads.client
        assert client is not None
        if self._throttle is not None:
            self._throttle = None
            if self._closed:
                return
            self.flow.resume_client(THROTTLED)
        self.budget.opened_at = self.gateway.limits.clock()
        ssl_object = client.get_extra_info("ssl_object")
        # The verified client certificate (TLS with client auth): its subject for log
        # lines, and its principal (ssl.principal.mapping.rules).
        self.tls_subject, self.principal = client_identity(
            ssl_object, self.gateway.config.tls_principal_mapping_rules
        )
        fallbacks: tuple[HostPort, ...] = ()
        unknown_node = None
        if self.gateway.sni is not None:
            # One port for every broker: the handshake's server name chose the broker.
            route = self.gateway.sni.routed(ssl_object)
            if route is None:  # the handshake refuses unroutable names; never here
                client.abort()
                return
            self.listener, self.upstream_address = route.listener, route.upstream
            fallbacks, unknown_node = route.fallbacks, route.unknown_node
        self.info = self.gateway.connection_opened(self)
        if self._closed:  # the gateway is stopping (Gateway.connection_opened)
            return
        asyncio.get_running_loop().create_task(dial(self, fallbacks, unknown_node))

    def eof_received(self) -> bool:
        return False  # Kafka does not half-close: close both directions.

    def connection_lost(self, exc: Exception | None) -> None:
        if self._throttle is not None:  # closed while held by the throttle
            self._throttle.cancel()
            self._throttle = None
        self.client_lost()
        self.gateway.connection_closed(self)

    def pause_writing(self) -> None:
        self.flow.pause_upstream(BACKPRESSURE)

    def resume_writing(self) -> None:
        self.flow.resume_upstream(BACKPRESSURE)

    # -- upstream socket -----------------------------------------------------------
    def upstream_made(self, upstream: asyncio.Transport) -> None:
        """``dial`` connected the upstream (its ApiVersions goes out next)."""
        upstream.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        self.reads.upstream = upstream


__all__ = ["READ_BYTES", "ClientConnection", "UpstreamConnection"]
