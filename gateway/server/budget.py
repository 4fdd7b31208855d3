"""A connection as the limits see it (``gateway/server/limits.py``'s ``Limited``): what
it buffers, how active it is, and its counts for the metrics and the connection
registry. A mixin of ``ClientConnection``."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .flow import MEMORY

if TYPE_CHECKING:
    from ..clients import ClientInfo
    from ..protocol import InFlight, RequestReader, ResponseReader
    from .services import GatewayServices


class LimitsTarget:
    """``ClientConnection``'s side that the limits and the metrics see."""

    __slots__ = ()

    if TYPE_CHECKING:
        gateway: GatewayServices
        inflight: InFlight
        info: ClientInfo | None
        listener: str
        requests: RequestReader
        responses: ResponseReader
        client: asyncio.Transport | None
        upstream: asyncio.Transport | None
        bytes_in: int
        bytes_out: int
        partial: int
        _held_size: int
        _first_done: bool
        _folded_in: int
        _folded_out: int

        def abort(self) -> None: ...
        def in_flight(self) -> int: ...
        def pause_client(self, reason: int) -> None: ...
        def resume_client(self, reason: int) -> None: ...
        def recharge_writes(self) -> None: ...

    def fold_stats(self) -> None:
        """Move this connection's counts into the labelled Prometheus series."""
        info = self.info
        if info is None:
            return
        stats = self.inflight.fold()
        self.sync_info()
        bytes_in = self.bytes_in - self._folded_in
        bytes_out = self.bytes_out - self._folded_out
        self._folded_in, self._folded_out = self.bytes_in, self.bytes_out
        self.gateway.metrics.traffic.fold((self.listener, *info.labels), stats, bytes_in, bytes_out)
        info.used(stats)  # hook: the versions its identity used (gateway.client_records)

    def sync_info(self) -> None:
        """Bring the registry's counts for this connection (/connections) up to date."""
        info = self.info
        if info is not None:
            info.requests = self.requests.frames
            info.bytes_in, info.bytes_out = self.bytes_in, self.bytes_out

    # -- connection limits (see gateway/server/limits.py) ---------------------------------
    def _recharge(self) -> None:
        self.partial = self._held_size + self.requests.buffered + self.responses.buffered
        self.recharge_writes()

    def buffered(self) -> int:
        """Partial frames and bytes not yet written, both ways."""
        # Runs after every read both ways (see _recharge): spelled out rather than a
        # loop over a tuple of the two transports, it costs 60-200 ns less a call.
        held = self._held_size + self.requests.buffered + self.responses.buffered
        client, upstream = self.client, self.upstream
        if client is not None:
            held += client.get_write_buffer_size()
        if upstream is not None:
            held += upstream.get_write_buffer_size()
        return held

    def activity(self) -> tuple[int, ...]:
        return (self.bytes_in + self._held_size, self.bytes_out, self.in_flight())

    def has_request(self) -> bool:
        if not self._first_done:
            frames = self.requests.frames
            self._first_done = frames > 1 or (frames == 1 and not self.requests.mid_frame)
        return self._first_done

    def memory_pause(self, paused: bool) -> None:
        if paused:
            self.pause_client(MEMORY)
        else:
            self.resume_client(MEMORY)

    def limit_close(self, reason: str) -> None:
        # At once, dropping what is not sent yet, as Kafka's broker closes an expired
        # connection. close() waits for the client to read its write buffer: a client
        # that had stopped reading kept it (and its part of queued_max_request_bytes)
        # for as long as it stayed connected, and was closed again at every sweep
        # (2 MB of answers to pipelined ApiVersions, idle-closed 8 times in
        # 8 s and still counted).
        self.abort()
