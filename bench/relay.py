#!/usr/bin/env python3
"""The floor of a uvloop proxy: a bare TCP relay, for the benches only.

Each accepted connection gets one upstream connection, and every chunk read on one
side is written to the other as it came (``data_received`` → ``write``), with the same
backpressure the gateway applies (a side that cannot keep up pauses the other's reading).
No framing, no in-flight table, no counting: what is left is the event loop, the
transports and the system calls, which any proxy on uvloop pays. ``scale_bench.py``
runs it as the ``relay`` path, so the gateway's CPU per request splits into this floor
and the gateway's own work, and the floor stands next to haproxy's in the same run.

    python bench/relay.py --listen 19300 --upstream 19092
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import signal
import socket

import uvloop

LOOPBACK = "127.0.0.1"


class _Side(asyncio.Protocol):
    """One socket of a pair; the other side's transport is ``peer``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.pending: list[bytes] = []  # client bytes read before the upstream connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.pending.append(data)
        else:
            peer.transport.write(data)

    def pause_writing(self) -> None:  # our socket is full: stop reading the other side
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def _pair(client: _Side, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    try:
        _, upstream = await loop.create_connection(_Side, LOOPBACK, upstream_port)
    except OSError:
        if client.transport is not None:
            client.transport.close()
        return
    client.peer, upstream.peer = upstream, client
    assert upstream.transport is not None
    for data in client.pending:
        upstream.transport.write(data)
    client.pending.clear()


async def serve(listen: int, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def accepted() -> _Side:
        client = _Side()
        task = loop.create_task(_pair(client, upstream_port))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return client

    server = await loop.create_server(accepted, LOOPBACK, listen, backlog=4096)
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    loop.add_signal_handler(signal.SIGINT, stop.set_result, None)
    async with server:
        await stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--upstream", type=int, required=True, help="port on 127.0.0.1")
    args = parser.parse_args(argv)
    # Two descriptors a connection: as many as the hard limit allows (as the gateway does).
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    uvloop.run(serve(args.listen, args.upstream))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
