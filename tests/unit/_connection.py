"""A real ``ClientConnection`` past negotiation, between two stand-in transports.

For tests of what the connection does with each read and write call: how many calls
carried the bytes, and when reading was paused, cannot be seen from the other end of a
real socket. The connection, its readers and the interceptors are the real ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from gateway.config import load_config
from gateway.features.report import NO_FEATURES
from gateway.server.app import Gateway
from gateway.server.proxy import ClientConnection
from gateway.versions import gateway_supported


class RecordingTransport:
    """Keeps what is written and whether reading is paused."""

    def __init__(self) -> None:
        self.written = 0
        self.reading = True
        self.closed = False
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += len(data)

    def writelines(self, frames: list[bytes | bytearray | memoryview]) -> None:
        for data in frames:
            self.write(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        assert self.reading, "paused twice"
        self.reading = False

    def resume_reading(self) -> None:
        assert not self.reading, "resumed while reading"
        self.reading = True

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True

    def can_write_eof(self) -> bool:
        return False  # as a TLS transport: a drained connection's close is plain close()

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass


T = TypeVar("T", bound=RecordingTransport)


def client_read(conn: ClientConnection, data: bytes) -> None:
    """A client read the lane left to the pair, sent as the lane sends what it gives."""
    conn.reads.send(conn.data_received(data))


def upstream_read(conn: ClientConnection, data: bytes) -> None:
    """The same for an upstream read."""
    conn.reads.send(conn.upstream_data(data))


def connected(transport: Callable[[], T], **settings: object) -> tuple[ClientConnection, T, T]:
    """(connection, its client transport, its upstream transport), the upstream's
    versions negotiated (every version the gateway supports); ``settings`` are config."""
    cfg = load_config(None, {"upstream": "127.0.0.1:9092", "listen": "127.0.0.1:0", **settings})
    conn = ClientConnection(Gateway(cfg), "sidecar", cfg.upstream)  # type: ignore[arg-type]
    client, upstream = transport(), transport()
    conn._client_made(client)  # type: ignore[arg-type]
    conn.upstream_made(upstream)  # type: ignore[arg-type]
    conn.negotiated(gateway_supported(), NO_FEATURES)
    return conn, client, upstream
