"""Upgrade in place: a new gateway takes the listening sockets over from the running one.

A restart used to close the listeners for ~1.6 s (the new process starting); clients
saw refused connections, and librdkafka's reconnect backoff stretched that to 4-5 s.
Here, as Shotover and Envoy's hot restart do, the sockets themselves move: the very
listening sockets (their accept queues included) are passed to the new process over a
Unix socket (SCM_RIGHTS), so no connection is refused or reset at any moment.

With ``upgrade_socket`` set, a serving gateway (the supervisor: a gateway with an
upgrade socket always runs supervised, even with one worker) listens on that path.
A new gateway started with the same path:

1. connects (``Successor.connect``, before it binds anything) and receives every
   listening socket of the old one: each old worker's client listeners (SO_REUSEPORT:
   one per worker; the bootstrap/sidecar/SNI listener and cluster mode's broker ports)
   and the supervisor's metrics listener;
2. starts as usual, but its workers accept on those sockets instead of binding (worker
   i takes old worker i's; a worker beyond the old count binds its own, joining the
   SO_REUSEPORT group) and its metrics endpoint serves the old one's socket;
3. once every worker serves, sends ``take_over``: the old one closes its metrics
   listener, deregisters from ZooKeeper, answers ``released`` and then stops as on
   SIGTERM (its workers stop accepting and drain: in-flight requests are answered,
   then each connection closes; ``drain_timeout_s``), exiting 0;
4. registers in ZooKeeper under the same gateway id and listens on the upgrade path.

If the new one fails before step 3 (bad config, refused start, killed), the old one sees
the connection close, logs ``handover.aborted`` and keeps serving: it never stopped.

Messages are JSON on a SOCK_SEQPACKET socket (one message per packet, fds riding with
it). The supervisor asks its workers for their sockets the same way, over a socketpair
each (``handover_workers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import HostPort
from ..observability.logging import get_logger
from .features import FeatureStartupError

log = get_logger("gateway.handover")

# File descriptors per message: the kernel's SCM_MAX_FD is 253.
FDS_PER_MESSAGE = 200
PACKET_BYTES = 1 << 20
# How long the old gateway waits for its successor to serve before it gives up on it
# (and keeps serving): the successor's start includes ZooKeeper and broker timeouts.
SUCCESSOR_START_S = 300.0
# How long the successor waits for the old one to hand over and to release.
PREDECESSOR_ANSWER_S = 30.0
METRICS = "metrics"


class HandoverFailed(OSError):
    """The running gateway would not hand over (busy with another successor, or gone)."""


@dataclass
class Listener:
    """One listening socket of a gateway and what it serves."""

    name: str  # the listener ("sidecar", "bootstrap", "sni", "broker-<id>", "metrics")
    host: str  # the address it was configured to bind
    port: int
    upstream: str | None  # where it forwards ("host:port"); None for metrics
    worker: int  # the old worker that served it; -1: the supervisor
    sock: socket.socket | None = field(default=None, compare=False)

    def spec(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "host": self.host,
            "port": self.port,
            "upstream": self.upstream,
            "worker": self.worker,
        }

    @property
    def address(self) -> HostPort:
        return HostPort(self.host, self.port)


# -- messages ----------------------------------------------------------------------------
def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def send_listeners(sock: socket.socket, listeners: list[Listener]) -> None:
    """In messages of at most FDS_PER_MESSAGE sockets; the last says ``more``: false."""
    chunks = [
        listeners[i : i + FDS_PER_MESSAGE] for i in range(0, len(listeners), FDS_PER_MESSAGE)
    ] or [[]]
    for n, chunk in enumerate(chunks):
        message = {
            "op": "listeners",
            "listeners": [item.spec() for item in chunk],
            "more": n < len(chunks) - 1,
        }
        send(sock, message, [item.sock.fileno() for item in chunk if item.sock is not None])


def _decode(data: bytes, fds: list[int]) -> tuple[dict[str, Any], list[int]]:
    if not data:
        for fd in fds:
            os.close(fd)
        raise EOFError("closed")
    return json.loads(data), fds


async def recv(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """A message and its fds from a non-blocking socket (asyncio has no recvmsg)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, PACKET_BYTES, FDS_PER_MESSAGE)
            return _decode(data, fds)
        except BlockingIOError:
            readable: asyncio.Future[None] = loop.create_future()

            def wake(future: asyncio.Future[None] = readable) -> None:
                if not future.done():
                    future.set_result(None)

            loop.add_reader(sock.fileno(), wake)
            try:
                await readable
            finally:
                loop.remove_reader(sock.fileno())


def _adopt(specs: list[dict[str, Any]], fds: list[int]) -> list[Listener]:
    """Listeners from a message: each spec takes the next fd."""
    out = []
    for spec, fd in zip(specs, fds, strict=True):
        out.append(Listener(**spec, sock=socket.socket(fileno=fd)))
    return out


async def recv_listeners(sock: socket.socket, timeout_s: float) -> list[Listener]:
    listeners: list[Listener] = []
    while True:
        async with asyncio.timeout(timeout_s):
            message, fds = await recv(sock)
        if message.get("op") != "listeners":
            raise HandoverFailed(message.get("why") or f"unexpected {message.get('op')!r}")
        listeners += _adopt(message["listeners"], fds)
        if not message.get("more"):
            return listeners


# -- the new gateway ---------------------------------------------------------------------
class Successor:
    """The new gateway's side: the old one's sockets, and the word that it may stop."""

    def __init__(self, path: str, sock: socket.socket, listeners: list[Listener]) -> None:
        self.path = path
        self._sock = sock
        self.listeners = listeners
        self.started_at = time.monotonic()

    @classmethod
    def connect(cls, path: str) -> Successor | None:
        """Before binding anything: the running gateway's sockets, or None when no
        gateway listens on ``path`` (then this one binds as usual)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()  # nothing there, or a crashed gateway's file: bind as usual
            return None
        try:
            send(sock, {"op": "hello", "pid": os.getpid()})
            sock.setblocking(False)
            # Before the gateway's own loop runs: a loop of its own for these reads.
            listeners = asyncio.run(recv_listeners(sock, PREDECESSOR_ANSWER_S))
        except (OSError, EOFError, TimeoutError, ValueError) as exc:
            sock.close()
            raise HandoverFailed(f"the gateway on {path} did not hand over: {exc}") from None
        log.info(
            "handover.received",
            path=path,
            listeners=sorted({f"{item.name} {item.address}" for item in listeners}),
            sockets=len(listeners),
        )
        return cls(path, sock, listeners)

    def metrics_socket(self, address: HostPort | None) -> socket.socket | None:
        """The old metrics listener when it is bound where this one's config says."""
        for item in self.listeners:
            if item.name == METRICS and address is not None and item.address == address:
                self.listeners.remove(item)
                return item.sock
        return None

    def for_worker(self, index: int) -> list[Listener]:
        """The client listeners worker ``index`` serves: old worker
        ``index``'s (when there were more old workers, the surplus ones stay with the
        old gateway and close with it)."""
        old_workers = sorted({item.worker for item in self.listeners if item.name != METRICS})
        if index >= len(old_workers):
            return []
        return [item for item in self.listeners if item.worker == old_workers[index]]

    def close_sockets(self) -> None:
        """This process's copies: the workers hold theirs (duplicated when started)."""
        for item in self.listeners:
            if item.sock is not None:
                item.sock.close()

    async def complete(self) -> None:
        """Every worker serves: tell the old gateway to stop accepting and wait until it
        has released the ZooKeeper registration. Raises HandoverFailed."""
        loop = asyncio.get_running_loop()
        self._sock.setblocking(False)
        try:
            await loop.sock_sendall(self._sock, json.dumps({"op": "take_over"}).encode())
            async with asyncio.timeout(PREDECESSOR_ANSWER_S):
                answer, _ = await recv(self._sock)
        except (OSError, EOFError, TimeoutError, ValueError) as exc:
            raise HandoverFailed(f"the old gateway did not release: {exc!r}") from None
        finally:
            self._sock.close()
        if answer.get("op") != "released":
            raise HandoverFailed(f"the old gateway answered {answer!r}")
        log.info(
            "handover.complete",
            path=self.path,
            old_pid=answer.get("pid"),
            seconds_since_received=round(time.monotonic() - self.started_at, 3),
        )


# -- the running gateway -----------------------------------------------------------------
class HandoverServer:
    """The running gateway's side: listens on the upgrade path, hands its sockets to one
    successor at a time and, when that one serves, releases and stops."""

    def __init__(
        self,
        path: str,
        collect: Callable[[], Awaitable[list[Listener]]],
        release: Callable[[], Awaitable[None]],
    ) -> None:
        self.path = path
        self._collect = collect
        self._release = release
        self._sock: socket.socket | None = None
        self._inode: int | None = None
        self._busy = False
        self._task: asyncio.Task[None] | None = None
        self._handovers: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a crashed gateway's, or the predecessor's (released)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Whoever connects gets the listening sockets: the path is the owner's from the
        # moment it exists (a chmod after the bind would leave a window).
        umask = os.umask(0o177)
        try:
            sock.bind(self.path)
        finally:
            os.umask(umask)
        sock.listen(4)
        sock.setblocking(False)
        self._sock, self._inode = sock, os.stat(self.path).st_ino
        self._task = asyncio.get_running_loop().create_task(self._accept())
        log.info("handover.listening", path=self.path)

    def close(self) -> None:
        """Stop listening; remove the path unless a successor has bound its own there.
        Handovers under way stop too, but for the one calling (it has taken over)."""
        if self._task is not None:
            self._task.cancel()
        try:
            current = asyncio.current_task()
        except RuntimeError:  # no running loop
            current = None
        for task in self._handovers:
            if task is not current:
                task.cancel()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            with contextlib.suppress(OSError):
                if os.stat(self.path).st_ino == self._inode:
                    os.unlink(self.path)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while self._sock is not None:
            conn, _ = await loop.sock_accept(self._sock)
            conn.setblocking(False)
            if self._busy:
                task = loop.create_task(self._refuse(conn))
            else:
                self._busy = True
                task = loop.create_task(self._hand_over(conn))
            self._handovers.add(task)
            task.add_done_callback(self._handovers.discard)

    async def _refuse(self, conn: socket.socket) -> None:
        """Another successor is starting: say so (after its hello, read so the close
        does not reset the connection before it reads the answer)."""
        with contextlib.suppress(OSError, EOFError, TimeoutError, ValueError):
            async with asyncio.timeout(5.0):
                await recv(conn)
            send(conn, {"op": "refused", "why": "another successor is starting"})
        conn.close()

    async def _hand_over(self, conn: socket.socket) -> None:
        listeners: list[Listener] = []
        try:
            hello, _ = await recv(conn)
            listeners = await self._collect()
            send_listeners(conn, listeners)
            log.info("handover.sent", successor_pid=hello.get("pid"), sockets=len(listeners))
            for item in listeners:  # the successor holds them now; the workers theirs
                if item.sock is not None:
                    item.sock.close()
            async with asyncio.timeout(SUCCESSOR_START_S):
                request, _ = await recv(conn)
            if request.get("op") != "take_over":
                raise ValueError(f"unexpected {request.get('op')!r}")
        except (OSError, EOFError, TimeoutError, ValueError) as exc:
            for item in listeners:
                if item.sock is not None:
                    item.sock.close()
            log.warning(
                "handover.aborted",
                reason=repr(exc),
                action="keeps serving: the new gateway did not start",
            )
            conn.close()
            self._busy = False
            return
        self.close()  # the successor listens on the path next
        await self._release()
        try:
            send(conn, {"op": "released", "pid": os.getpid()})
        except OSError as exc:
            log.error("handover.release_unanswered", error=repr(exc))
        conn.close()
        log.info("handover.released", action="draining, then exit 0")


async def register_when_free(register: Callable[[], Awaitable[None]], wait_s: float) -> None:
    """Register under the old gateway's id: free at once when it released, or once its
    ZooKeeper session expires (it was killed): GatewayIdTaken until then."""
    deadline = time.monotonic() + 2 * wait_s + 5
    while True:
        try:
            await register()
            return
        except FeatureStartupError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def server_listeners(server: asyncio.Server | None, address: HostPort | None) -> list[Listener]:
    """The metrics listener of ``server`` (duplicates), to hand over."""
    if server is None or address is None:
        return []
    return [
        Listener(METRICS, address.host, address.port, None, -1, _dup(sock))
        for sock in server.sockets
    ]


def _dup(sock: Any) -> socket.socket:
    """A socket of our own for a listener's (asyncio's TransportSocket cannot be sent)."""
    return socket.fromfd(sock.fileno(), sock.family, sock.type)
