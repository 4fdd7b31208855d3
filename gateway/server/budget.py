"""A connection as the limits see it (``gateway/server/limits.py``'s ``Limited``): what
it buffers, how active it is, and how to pause or close it. One ``Budget`` per
connection, made and held by its ``pair.Pair``; the limits hold the budget, never the
connection."""

from __future__ import annotations

from typing import Protocol

from ..protocol import RequestReader, ResponseReader
from .flow import MEMORY, Flow
from .reads import lane


class Buffering(Protocol):
    """What the budget reads of its connection (``pair.Pair``)."""

    peer_ip: str
    # Client bytes held until the upstream's versions are known.
    held_size: int
    requests: RequestReader
    responses: ResponseReader
    # Its compiled reads: byte counts, the charge and the two sockets.
    reads: lane.Reads
    # Its pauses: MEMORY is the budget's.
    flow: Flow

    def in_flight(self) -> int: ...
    def abort(self) -> None: ...


class Budget:
    """One connection's part of queued_max_request_bytes, and its deadlines' view."""

    __slots__ = ("_conn", "_first_done", "counted", "opened_at")

    def __init__(self, conn: Buffering) -> None:
        self._conn = conn
        self._first_done = False
        self.counted = False  # in the caps' counts (ConnectionLimits.admit/release)
        self.opened_at = 0.0  # when it was served (after the creation-rate throttle)

    @property
    def peer_ip(self) -> str:
        return self._conn.peer_ip

    @property
    def charged(self) -> int:
        """Bytes counted against queued_max_request_bytes (ConnectionLimits.charge)."""
        return self._conn.reads.charged

    def recount(self) -> None:
        """Count the partial frames and held bytes the pair buffers now (after each read
        of the Python path): the reads add the sockets' write buffers once they sent what
        the read gave them (``Reads.send``)."""
        conn = self._conn
        conn.reads.partial = conn.held_size + conn.requests.buffered + conn.responses.buffered

    def buffered(self) -> int:
        """Partial frames and bytes not yet written, both ways."""
        conn = self._conn
        held = conn.held_size + conn.requests.buffered + conn.responses.buffered
        client, upstream = conn.reads.client, conn.reads.upstream
        if client is not None:
            held += client.get_write_buffer_size()
        if upstream is not None:
            held += upstream.get_write_buffer_size()
        return held

    def activity(self) -> tuple[int, ...]:
        conn = self._conn
        reads = conn.reads
        return (reads.bytes_in + conn.held_size, reads.bytes_out, conn.in_flight())

    def has_request(self) -> bool:
        if not self._first_done:
            requests = self._conn.requests
            frames = requests.frames
            self._first_done = frames > 1 or (frames == 1 and not requests.mid_frame)
        return self._first_done

    def memory_pause(self, paused: bool) -> None:
        if paused:
            self._conn.flow.pause_client(MEMORY)
        else:
            self._conn.flow.resume_client(MEMORY)

    def limit_close(self, reason: str) -> None:
        # At once, dropping what is not sent yet, as Kafka's broker closes an expired
        # connection. close() waits for the client to read its write buffer: a client
        # that had stopped reading kept it (and its part of queued_max_request_bytes)
        # for as long as it stayed connected, and was closed again at every sweep
        # (2 MB of answers to pipelined ApiVersions, idle-closed 8 times in
        # 8 s and still counted).
        self._conn.abort()
