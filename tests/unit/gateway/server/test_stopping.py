"""A connection accepted while the gateway stops: shutdown drained the connections it
had, so one accepted as the listeners closed is closed at once, not left open (and the
process with it) until drain_timeout_s. The harness saw a worker outlive its SIGTERM by
more than 10 s that way, under load, when a client connected at the moment of the stop.
The gateway and the connection are real; the transport is a stand-in (a socket cannot
be made to arrive between the listeners' close and the drain on purpose)."""

from __future__ import annotations

from gateway.config import load_config
from gateway.server.app import Gateway
from gateway.server.proxy import ClientConnection
from tests.unit._connection import RecordingTransport


class AcceptedTransport(RecordingTransport):
    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 40000) if name == "peername" else None

    def abort(self) -> None:
        self.closed = True


def accepted(stopping: bool) -> tuple[Gateway, ClientConnection, AcceptedTransport]:
    cfg = load_config(None, {"upstream": "127.0.0.1:9092", "listen": "127.0.0.1:0"})
    gateway = Gateway(cfg)
    gateway.stopping = stopping
    conn = ClientConnection(gateway, "sidecar", cfg.upstream)  # type: ignore[arg-type]
    client = AcceptedTransport()
    conn.connection_made(client)  # type: ignore[arg-type]
    return gateway, conn, client


def test_a_connection_accepted_while_stopping_is_closed_at_once() -> None:
    gateway, conn, client = accepted(stopping=True)
    assert conn.closed and client.closed
    conn.connection_lost(None)
    assert not gateway.connections


def test_a_connection_accepted_while_running_is_served() -> None:
    import asyncio

    async def run() -> tuple[Gateway, ClientConnection]:
        gateway, conn, _ = accepted(stopping=False)
        return gateway, conn

    gateway, conn = asyncio.run(run())
    assert not conn.closed and conn in gateway.connections
