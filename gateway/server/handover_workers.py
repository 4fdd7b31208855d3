"""Upgrade in place, inside a gateway: the supervisor's side (its workers' listening
sockets gathered for a successor; the sockets it inherited handed to its own workers)
and each worker's. The process-to-process part: ``handover``.

A worker gets a ``WorkerHandover``: one end of a SOCK_SEQPACKET socketpair on which the
supervisor asks for the worker's listening sockets, and the old worker's sockets it is
to serve (worker i takes old worker i's; with more workers than before, the others bind
their own and join the SO_REUSEPORT group; with fewer, the surplus old sockets close
with the old gateway).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..config import Config, HostPort, parse_host_port
from ..observability.logging import get_logger
from .handover import (
    FDS_PER_MESSAGE,
    PACKET_BYTES,
    HandoverFailed,
    HandoverServer,
    Listener,
    Successor,
    recv,
    recv_listeners,
    register_when_free,
    send,
    send_listeners,
)

log = get_logger("gateway.handover")


@dataclass
class WorkerHandover:
    """Given to each worker: the channel its supervisor asks for its listening sockets
    on, and the sockets it inherits from the old gateway's worker of the same index."""

    channel: socket.socket
    inherited: list[Listener] = field(default_factory=list)

    def take(self, name: str, address: HostPort) -> socket.socket | None:
        """The inherited socket of listener ``name`` if it is bound where this worker's
        config says (a changed address is bound anew)."""
        for item in self.inherited:
            if item.name == name and item.address == address:
                self.inherited.remove(item)
                return item.sock
        return None

    def brokers(self) -> list[tuple[str, HostPort, HostPort]]:
        """Inherited broker listeners (cluster mode), to serve from the start as the old
        worker did: this worker learns of the brokers only from its own Metadata."""
        return [
            (item.name, item.address, parse_host_port(item.name, item.upstream))
            for item in self.inherited
            if item.name.startswith("broker-") and item.upstream is not None
        ]

    def close_unused(self) -> None:
        for item in self.inherited:
            if item.sock is not None:
                item.sock.close()
        self.inherited.clear()


#: Each listener's name, address, upstream and a duplicate of its socket
#: (Gateway.listening_sockets).
ListeningSockets = Callable[[], list[tuple[str, HostPort, HostPort, socket.socket]]]


async def answer_supervisor(
    worker_index: int, listening_sockets: ListeningSockets, channel: socket.socket
) -> None:
    """In a worker: answer the supervisor's requests for this worker's listening sockets
    (the supervisor is handing them to a successor)."""
    channel.setblocking(False)
    while True:
        try:
            request, _ = await recv(channel)
        except (OSError, EOFError):
            return  # the supervisor is gone; the worker notices that on its own
        if request.get("op") != "listeners":
            continue
        listeners = [
            Listener(name, address.host, address.port, str(upstream), worker_index, sock)
            for name, address, upstream, sock in listening_sockets()
        ]
        try:
            send_listeners(channel, listeners)
        except OSError as exc:
            log.error("handover.worker_send_failed", error=repr(exc))
        for item in listeners:  # duplicates: the listeners serve on
            if item.sock is not None:
                item.sock.close()


# -- the supervisor's part ---------------------------------------------------------------
class SupervisorHandover:
    """What a supervisor needs for upgrade in place: its workers' channels, the sockets it
    inherited, and the handover server once it serves."""

    def __init__(self, config: Config, successor: Successor | None) -> None:
        self.config = config
        self.successor = successor
        self._channels: dict[int, socket.socket] = {}
        self.server: HandoverServer | None = None

    def for_worker(self, index: int) -> WorkerHandover | None:
        """A new channel for worker ``index`` (a dead one's closes), and what it inherits
        (until the old gateway released: a worker restarted later binds its own)."""
        if self.config.upgrade_socket is None:
            return None
        old = self._channels.pop(index, None)
        if old is not None:
            old.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        self._channels[index] = ours
        inherited = self.successor.for_worker(index) if self.successor else []
        return WorkerHandover(theirs, inherited)

    def started_worker(self, handover: WorkerHandover | None) -> None:
        """The worker has its own copies now (multiprocessing duplicated them)."""
        if handover is not None:
            handover.channel.close()

    def metrics_socket(self) -> socket.socket | None:
        if self.successor is None:
            return None
        return self.successor.metrics_socket(self.config.metrics_listen)

    async def after_serving(
        self,
        register: Callable[[], Awaitable[None]],
        collect_own: Callable[[], list[Listener]],
        release: Callable[[], Awaitable[None]],
    ) -> None:
        """Every worker serves: take over from the old gateway (then register, which its
        registration would have refused), and listen for a successor of our own."""
        if self.successor is not None:
            self.successor.close_sockets()
            try:
                await self.successor.complete()
            except HandoverFailed as exc:
                # This gateway serves every socket now; the old one is gone or stuck.
                log.error("handover.unconfirmed", error=str(exc), action="serving anyway")
            self.successor = None
            await register_when_free(register, self.config.zookeeper_timeout_s)
        path = self.config.upgrade_socket
        if path is not None:

            async def collect() -> list[Listener]:
                return collect_own() + await self._collect_workers()

            self.server = HandoverServer(path, collect, release)
            self.server.start()

    async def _collect_workers(self) -> list[Listener]:
        """Every live worker's listening sockets (one that does not answer in time is
        dying or restarting: its sockets go with it, as today)."""

        async def ask(index: int, channel: socket.socket) -> list[Listener]:
            try:
                # A late answer to an earlier, timed-out request must not pass for this one.
                with contextlib.suppress(BlockingIOError):
                    while True:
                        data, fds, _, _ = socket.recv_fds(channel, PACKET_BYTES, FDS_PER_MESSAGE)
                        for fd in fds:
                            os.close(fd)
                        if not data:
                            raise EOFError("the worker is gone")
                send(channel, {"op": "listeners"})
                return await recv_listeners(channel, 2.0)
            except (OSError, EOFError, TimeoutError, ValueError) as exc:
                log.warning("handover.worker_unanswered", worker=index, error=repr(exc))
                return []

        parts = await asyncio.gather(*(ask(i, c) for i, c in sorted(self._channels.items())))
        return [item for part in parts for item in part]

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
