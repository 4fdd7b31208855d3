"""Who is connected: the KIP-511 connection registry (pure, no I/O).

Kafka tags its ``connections`` metric and its request log with the client software
name/version a client announced in ApiVersions v3+ (KIP-511). The gateway keeps the
same facts per client connection (``gateway.client_info.ClientInfo``), plus what an
operator asks next (since when, how many requests, how many bytes); the registry holds
the live ones by id, so later layers can expose them as metrics and over HTTP.

Each connection is also attributed to a client identity of the bounded record
(``gateway.client_records``, /clients): at its first request (client id), at a KIP-511
ApiVersions (software), or at the latest when it closes. A client without a KIP-511 name
is labelled by its client id (``client_records.identity_of_client_id``), read from the
header of its first request even when that header arrives over several reads.

Everything runs on the event loop thread: no locks.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from .client_info import ClientInfo
from .client_records import (
    UNKNOWN,
    ClientRecord,
    ClientRecords,
    identity_of_client_id,
    peer_ip,
)
from .protocol import API_VERSIONS, Malformed, parse_request_header

# The most bytes of a first request kept while its header is incomplete (a client id is
# at most 32767 bytes; one that long is not waited for).
FIRST_REQUEST_PREFIX_MAX = 4096


class _Labels(Protocol):
    """What attributing a connection asks of the metrics (``Metrics``)."""

    def software_labels(self, name: str, version: str) -> tuple[str, str]: ...
    def client_identified(
        self, listener: str, old: tuple[str, str], new: tuple[str, str]
    ) -> None: ...


class ConnectionRegistry:
    """Live client connections by id, and the identities they are attributed to
    (``identities``). ``clock`` is injectable for tests."""

    __slots__ = ("_clients", "_clock", "_ids", "identities")

    def __init__(
        self, clock: Callable[[], float] = time.time, identities: ClientRecords | None = None
    ) -> None:
        self._clients: dict[int, ClientInfo] = {}
        self._clock = clock
        self._ids = itertools.count(1)
        self.identities = identities if identities is not None else ClientRecords(clock=clock)

    def add(
        self,
        peer: str,
        listener: str,
        client_id: str | None = None,
        connection_id: int | None = None,
        principal: str | None = None,
    ) -> ClientInfo:
        """Register a new connection; ids are assigned in order unless given."""
        if connection_id is None:
            connection_id = next(self._ids)
        if connection_id in self._clients:
            raise ValueError(f"connection {connection_id} is already registered")
        info = ClientInfo(connection_id, peer, listener, self._clock(), client_id, principal)
        self._clients[connection_id] = info
        return info

    def remove(self, connection_id: int) -> ClientInfo | None:
        """Forget a closed connection; returns what was known about it (None if unknown).

        One that was never attributed (closed before its first request was read, or
        identified by nothing else) counts for its client id, or "unknown", now."""
        info = self._clients.pop(connection_id, None)
        if info is not None:
            record = info.record or self.attribute(info)
            record.connections_active = max(0, record.connections_active - 1)
            self.identities.seen(record)
        return info

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
        self.attribute(info)
        return True

    def set_principal(
        self, info: ClientInfo, principal: str | None, mechanism: str | None, outcome: str
    ) -> None:
        """A SASL login of ``info``'s connection ended (``outcome``): its principal is
        now ``principal``, which its identity's record counts once per connection."""
        changed = principal != info.principal
        info.principal = principal
        info.sasl_mechanism = mechanism
        info.sasl_login = outcome
        if changed and principal is not None and info.record is not None:
            info.record.add_principal(principal)

    # -- identities (client_records) -------------------------------------------------------
    def attribute(self, info: ClientInfo) -> ClientRecord:
        """Count ``info``'s connection for its identity now (its software, client id and
        address); one attributed to another identity before is moved."""
        key = (info.software_name, info.software_version, info.client_id or "")
        old = info.record
        if old is not None:
            if old.key == key:
                return old
            old.unopened(peer_ip(info.peer))
        record = self.identities.record(key, info.labels)
        record.opened(peer_ip(info.peer))
        if info.principal is not None:
            record.add_principal(info.principal)
        info.record = record
        if info.pending_used:
            record.add_used(info.pending_used)
        if info.pending_refused:
            for (api_key, version, reason), count in info.pending_refused.items():
                record.add_refused(api_key, version, reason, count)
        info.pending_used = info.pending_refused = None
        return record

    def first_read(self, conn: _FirstReader, data: bytes) -> None:
        """A read of a connection whose first request's header was not read yet (the
        connection calls this only while ``info.awaiting_first``).

        Clients pinned to old versions may never send ApiVersions: the header of their
        first request (Metadata, Produce, ...) is the first to name their client id. A
        client without a KIP-511 name is labelled by that id from now on; one whose
        first request is ApiVersions v3+ waits for it to name its software."""
        info = conn.info
        if info is None:
            return
        start = _request_start(info, data)
        if start is None:
            return
        api_key, api_version = start
        self.identities.limit = getattr(
            conn.gateway.config, "max_client_identities", self.identities.limit
        )
        if api_key == API_VERSIONS and api_version >= 3:
            # Its answer names its software (set_software); one whose name is refused
            # as invalid stays "unknown" in labels, and counts for its client id when
            # it closes.
            return
        self.identify_by_client_id(info, conn.gateway.metrics, conn.listener)

    def identify_by_client_id(self, info: ClientInfo, metrics: _Labels, listener: str) -> None:
        """Label a connection without KIP-511 software by its client id; attribute it."""
        if info.software_name == UNKNOWN:
            derived = identity_of_client_id(info.client_id)
            if derived is not None and info.labels == (UNKNOWN, UNKNOWN):
                old = info.labels
                info.labels = metrics.software_labels(derived, UNKNOWN)
                metrics.client_identified(listener, old, info.labels)
        self.attribute(info)

    def __len__(self) -> int:
        return len(self._clients)

    def __iter__(self) -> Iterator[ClientInfo]:
        return iter(list(self._clients.values()))

    def __contains__(self, connection_id: object) -> bool:
        return connection_id in self._clients

    def identities_snapshot(self) -> list[dict[str, Any]]:
        """/clients: every identity of the bounded record, as JSON-ready dicts."""
        return self.identities.snapshot()

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


class _Gateway(Protocol):
    config: Any  # reads max_client_identities
    metrics: _Labels


class _FirstReader(Protocol):
    """What ``ConnectionRegistry.first_read`` reads of a connection."""

    info: ClientInfo | None
    listener: str
    gateway: _Gateway


def _request_start(info: ClientInfo, data: bytes) -> tuple[int, int] | None:
    """(api_key, api_version) of the first request once its header is in
    ``info.first_bytes`` + ``data`` (read by the protocol's own header rule), its client
    id then in ``info.client_id``; None while more is needed. A first request whose
    header does not read, or does not arrive within FIRST_REQUEST_PREFIX_MAX bytes, ends
    the wait with (-1, -1)."""
    buf = info.first_bytes + data if info.first_bytes else data
    done = (-1, -1)
    if len(buf) >= 4:
        size = int.from_bytes(buf[0:4], "big", signed=True)
        whole = len(buf) >= 4 + size
        try:
            header = parse_request_header(memoryview(buf)[4 : 4 + max(size, 0)])
        except Malformed:
            if not whole and size >= 8 and len(buf) < FIRST_REQUEST_PREFIX_MAX:
                info.first_bytes = bytes(buf)
                return None  # the header's end is still to come
        else:
            if header.client_id is not None:
                info.client_id = header.client_id
            done = (header.api_key, header.api_version)
    elif len(buf) < FIRST_REQUEST_PREFIX_MAX:
        info.first_bytes = bytes(buf)
        return None
    info.first_bytes = b""
    info.awaiting_first = False
    return done
