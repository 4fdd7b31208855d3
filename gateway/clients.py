"""Who is connected: the KIP-511 connection registry (pure, no I/O).

Kafka tags its ``connections`` metric and its request log with the client software
name/version a client announced in ApiVersions v3+ (KIP-511). The gateway keeps the
same facts per client connection, plus what an operator asks next (since when, how
many requests, how many bytes), so later layers can expose them as metrics, over HTTP
and in every request-log line.

Each connection is also attributed to a client identity of the bounded record
(``gateway.client_records``, /clients): at its first request (client id), at a KIP-511
ApiVersions (software), or at the latest when it closes. A client without a KIP-511 name
is labelled by its client id (``client_records.identity_of_client_id``).

Everything runs on the event loop thread: no locks. Counters are plain attributes of a
slotted object so bumping them on the hot path costs an attribute add.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Protocol

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


class _Requests(Protocol):
    """What ``ClientInfo.used`` reads of a fold (``protocol.ApiStats``)."""

    requests: dict[tuple[int, int], int]


class _Labels(Protocol):
    """What attributing a connection asks of the metrics (``Metrics``)."""

    def software_labels(self, name: str, version: str) -> tuple[str, str]: ...
    def client_identified(
        self, listener: str, old: tuple[str, str], new: tuple[str, str]
    ) -> None: ...


class ClientInfo:
    """One client connection. Software stays "unknown" until a valid ApiVersions v3+."""

    __slots__ = (
        "_labels",
        "awaiting_first",
        "bridged",
        "bytes_in",
        "bytes_out",
        "client_id",
        "connected_since",
        "connection_id",
        "first_bytes",
        "listener",
        "peer",
        "pending_refused",
        "pending_used",
        "principal",
        "record",
        "requests",
        "sasl_login",
        "sasl_mechanism",
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
        principal: str | None = None,
    ) -> None:
        self.connection_id = connection_id
        self.peer = peer  # "host:port" of the client
        self.listener = listener  # name of the gateway listener it came in on
        self.client_id = client_id  # header client_id of the latest request
        self.software_name = UNKNOWN
        self.software_version = UNKNOWN
        # "User:..." as Kafka names it (a SASL login the broker accepted, else a TLS
        # client certificate's); None: neither. The mechanism of its last SASL login,
        # and how that ended (gateway.protocol._sasl_login: authenticated, failed, or
        # unobserved for GSSAPI and mechanisms whose principal is the broker's alone).
        self.principal = principal
        self.sasl_mechanism: str | None = None
        self.sasl_login: str | None = None
        # The (name, version) its metric series carry: the software, or "other" past
        # max_client_software_labels (Metrics.software_labels).
        self._labels = (UNKNOWN, UNKNOWN)
        # The identity it is attributed to (client_records), None until then; what it
        # used or had refused before that waits in the pending dicts.
        self.record: ClientRecord | None = None
        self.pending_used: dict[tuple[int, int], int] | None = None
        self.pending_refused: dict[tuple[int, int, str], int] | None = None
        # True until the header of its first request was read (ConnectionRegistry.
        # first_read); meanwhile the compiled lane leaves its reads to Python.
        self.awaiting_first = True
        self.first_bytes = b""  # a first request's start, while its header is incomplete
        self.connected_since = connected_since  # wall clock, seconds since the epoch
        self.requests = 0
        self.bytes_in = 0  # request bytes from the client, framing included
        self.bytes_out = 0  # response bytes to the client, framing included
        self.bridged = 0  # requests the version bridge converted (gateway.bridge)

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

    @property
    def labels(self) -> tuple[str, str]:
        return self._labels

    @labels.setter
    def labels(self, value: tuple[str, str]) -> None:
        self._labels = value
        if self.record is not None:
            self.record.identity, self.record.identity_version = value

    def used(self, stats: _Requests) -> None:
        """Requests by (api_key, api_version) since the last call (a fold of its
        counts): the versions its identity used."""
        requests = stats.requests
        if not requests:
            return
        if self.record is not None:
            self.record.add_used(requests)
            return
        pending = self.pending_used
        if pending is None:
            pending = self.pending_used = {}
        for key, count in requests.items():
            pending[key] = pending.get(key, 0) + count

    def refused(self, api_key: int, api_version: int, reason: str) -> None:
        """One of its requests was refused (Metrics.refused)."""
        if self.record is not None:
            self.record.add_refused(api_key, api_version, reason)
            return
        pending = self.pending_refused
        if pending is None:
            pending = self.pending_refused = {}
        key = (api_key, api_version, reason)
        pending[key] = pending.get(key, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view (``connected_since`` also as ISO 8601, UTC)."""
        return {
            "connection_id": self.connection_id,
            "peer": self.peer,
            "listener": self.listener,
            "client_id": self.client_id,
            "software_name": self.software_name,
            "software_version": self.software_version,
            "principal": self.principal,
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_login": self.sasl_login,
            "connected_since": self.connected_since,
            "connected_since_iso": datetime.fromtimestamp(self.connected_since, UTC).isoformat(),
            "requests": self.requests,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "bridged_requests": self.bridged,
        }

    def log_fields(self) -> dict[str, Any]:
        """The few fields every request-log line carries (cheap: no formatting); the
        principal once there is one."""
        fields = {
            "connection_id": self.connection_id,
            "peer": self.peer,
            "client_id": self.client_id,
            "client_software_name": self.software_name,
            "client_software_version": self.software_version,
        }
        if self.principal is not None:
            fields["principal"] = self.principal
        return fields

    def __repr__(self) -> str:
        return (
            f"ClientInfo(#{self.connection_id} {self.peer} {self.listener} "
            f"{self.software_name}/{self.software_version})"
        )


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
