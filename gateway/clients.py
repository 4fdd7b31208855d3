"""Who is connected: the KIP-511 connection registry (pure, no I/O).

Kafka tags its ``connections`` metric and its request log with the client software
name/version a client announced in ApiVersions v3+ (KIP-511). The gateway keeps the
same facts per client connection, plus what an operator asks next (since when, how
many requests, how many bytes), so later layers can expose them as metrics, over HTTP
and in every request-log line.

Everything runs on the event loop thread: no locks. Counters are plain attributes of a
slotted object so bumping them on the hot path costs an attribute add.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

UNKNOWN = "unknown"


class ClientInfo:
    """One client connection. Software stays "unknown" until a valid ApiVersions v3+."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
        "client_id",
        "connected_since",
        "connection_id",
        "labels",
        "listener",
        "peer",
        "requests",
        "software_name",
        "software_version",
    )

    def __init__(
        self,
        connection_id: int,
        peer: str,
        listener: str,
        connected_since: float,
        client_id: str | None = None,
    ) -> None:
        self.connection_id = connection_id
        self.peer = peer  # "host:port" of the client
        self.listener = listener  # name of the gateway listener it came in on
        self.client_id = client_id  # header client_id of the latest request
        self.software_name = UNKNOWN
        self.software_version = UNKNOWN
        # The (name, version) its metric series carry: the software, or "other" past
        # max_client_software_labels (Metrics.software_labels).
        self.labels = (UNKNOWN, UNKNOWN)
        self.connected_since = connected_since  # wall clock, seconds since the epoch
        self.requests = 0
        self.bytes_in = 0  # request bytes from the client, framing included
        self.bytes_out = 0  # response bytes to the client, framing included

    def on_request(self, size: int, client_id: str | None = None) -> None:
        """Count one request of ``size`` bytes; remember its header client_id."""
        self.requests += 1
        self.bytes_in += size
        if client_id is not None:
            self.client_id = client_id

    def on_response(self, size: int) -> None:
        self.bytes_out += size

    @property
    def software(self) -> tuple[str, str]:
        return self.software_name, self.software_version

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view (``connected_since`` also as ISO 8601, UTC)."""
        return {
            "connection_id": self.connection_id,
            "peer": self.peer,
            "listener": self.listener,
            "client_id": self.client_id,
            "software_name": self.software_name,
            "software_version": self.software_version,
            "connected_since": self.connected_since,
            "connected_since_iso": datetime.fromtimestamp(self.connected_since, UTC).isoformat(),
            "requests": self.requests,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
        }

    def log_fields(self) -> dict[str, Any]:
        """The few fields every request-log line carries (cheap: no formatting)."""
        return {
            "connection_id": self.connection_id,
            "peer": self.peer,
            "client_id": self.client_id,
            "client_software_name": self.software_name,
            "client_software_version": self.software_version,
        }

    def __repr__(self) -> str:
        return (
            f"ClientInfo(#{self.connection_id} {self.peer} {self.listener} "
            f"{self.software_name}/{self.software_version})"
        )


class ConnectionRegistry:
    """Live client connections by id. ``clock`` is injectable for tests."""

    __slots__ = ("_clients", "_clock", "_ids")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clients: dict[int, ClientInfo] = {}
        self._clock = clock
        self._ids = itertools.count(1)

    def add(
        self,
        peer: str,
        listener: str,
        client_id: str | None = None,
        connection_id: int | None = None,
    ) -> ClientInfo:
        """Register a new connection; ids are assigned in order unless given."""
        if connection_id is None:
            connection_id = next(self._ids)
        if connection_id in self._clients:
            raise ValueError(f"connection {connection_id} is already registered")
        info = ClientInfo(connection_id, peer, listener, self._clock(), client_id)
        self._clients[connection_id] = info
        return info

    def remove(self, connection_id: int) -> ClientInfo | None:
        """Forget a closed connection; returns what was known about it (None if unknown)."""
        return self._clients.pop(connection_id, None)

    def get(self, connection_id: int) -> ClientInfo | None:
        return self._clients.get(connection_id)

    def set_software(self, connection_id: int, name: str, version: str) -> bool:
        """Record the KIP-511 software of a connection; False if it is not registered.

        Only call this with values that passed the KIP-511 validation: an invalid
        announcement leaves the client "unknown", as in Kafka.
        """
        info = self._clients.get(connection_id)
        if info is None:
            return False
        info.software_name = name
        info.software_version = version
        return True

    def __len__(self) -> int:
        return len(self._clients)

    def __iter__(self) -> Iterator[ClientInfo]:
        return iter(list(self._clients.values()))

    def __contains__(self, connection_id: object) -> bool:
        return connection_id in self._clients

    def snapshot(self) -> list[dict[str, Any]]:
        """Every live connection as a JSON-ready dict, oldest first."""
        return [info.as_dict() for info in self._clients.values()]

    def count_by_software(self) -> dict[tuple[str, str, str], int]:
        """Connections per (listener, software name, software version).

        The shape of Kafka's KIP-511 ``connections`` metric (tagged clientSoftwareName,
        clientSoftwareVersion, listener).
        """
        counts = Counter(
            (info.listener, info.software_name, info.software_version)
            for info in self._clients.values()
        )
        return dict(counts)
