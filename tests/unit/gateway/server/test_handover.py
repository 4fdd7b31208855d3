"""The upgrade-in-place handshake (gateway/server/handover.py) between two ends in one
process: listening sockets pass over the Unix socket and still accept, a successor that
goes away leaves the old side serving, a second successor is refused meanwhile, and a
stale socket file means "nothing to take over". The whole thing with real gateways and
clients: tests/integration/test_upgrade_in_place.py."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from gateway.server.handover import (
    HandoverFailed,
    HandoverServer,
    Listener,
    Successor,
)


def listening() -> socket.socket:
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    return sock


class OldSide:
    """A HandoverServer on its own loop in a thread (Successor.connect blocks)."""

    def __init__(self, path: str, sockets: list[socket.socket]) -> None:
        self.path = path
        self.sockets = sockets
        self.released = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.server: HandoverServer | None = None
        started = threading.Event()

        async def start() -> None:
            self.server = HandoverServer(path, self.collect, self.release)
            self.server.start()
            started.set()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(start())
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait(5)

    async def collect(self) -> list[Listener]:
        return [
            Listener("sidecar", "127.0.0.1", s.getsockname()[1], "broker:9092", 0, s.dup())
            for s in self.sockets
        ]

    async def release(self) -> None:
        self.released.set()

    def stop(self) -> None:
        assert self.server is not None
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_the_sockets_pass_over_and_accept_in_the_new_process(tmp_path: Path) -> None:
    path = str(tmp_path / "upgrade.sock")
    old_socket = listening()
    old = OldSide(path, [old_socket])
    try:
        # Only the owner may connect (and so receive the listening sockets).
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        successor = Successor.connect(path)
        assert successor is not None
        (item,) = successor.listeners
        assert (item.name, item.port, item.upstream) == (
            "sidecar",
            old_socket.getsockname()[1],
            "broker:9092",
        )
        assert item.sock is not None
        # The same listening socket: a connection made to it is accepted through the copy.
        old_socket.close()
        with socket.create_connection(("127.0.0.1", item.port), timeout=5):
            item.sock.settimeout(5)
            accepted, _ = item.sock.accept()
            accepted.close()
        asyncio.run(successor.complete())
        assert old.released.wait(5)
        assert not os.path.exists(path), "the old side stops listening on the path"
        successor.close_sockets()
    finally:
        old.stop()


def test_a_successor_that_goes_away_leaves_the_old_side_waiting_for_the_next(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "upgrade.sock")
    old = OldSide(path, [listening()])
    try:
        first = Successor.connect(path)
        assert first is not None
        # While one starts, a second is refused (it would take the same sockets).
        with pytest.raises(HandoverFailed, match="another successor"):
            Successor.connect(path)
        first._sock.close()  # the first one dies before it serves
        first.close_sockets()
        second = None
        for _ in range(50):  # the old side notices the close on its loop
            try:
                second = Successor.connect(path)
                break
            except HandoverFailed:
                threading.Event().wait(0.05)
        assert second is not None and len(second.listeners) == 1
        assert not old.released.is_set()
        second.close_sockets()
    finally:
        old.stop()


def test_no_gateway_on_the_path_means_bind_as_usual(tmp_path: Path) -> None:
    path = tmp_path / "upgrade.sock"
    assert Successor.connect(str(path)) is None
    # A crashed gateway's socket file: nobody listens.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stale.bind(str(path))
    stale.close()
    assert path.exists()
    assert Successor.connect(str(path)) is None
