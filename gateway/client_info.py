"""One client connection as the gateway knows it: ``ClientInfo`` (pure, no I/O).

What Kafka keeps of a connection for KIP-511 (the client software name and version a
client announced in ApiVersions v3+; "unknown" until then), its principal and SASL login,
and what an operator asks next: since when, how many requests, how many bytes, how many
the version bridge converted. ``/connections`` shows it (``as_dict``), every request-log
line carries a few of its fields (``log_fields``), and the versions it used or had
refused go to the identity it is attributed to (``client_records``), or wait for one.

Apart from the registry (``gateway.clients``) that makes, attributes and forgets these
because the connection's hot path holds one and bumps its counters: a slotted object of
plain attributes, so a count costs an attribute add and no lock (everything runs on the
event loop thread).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

from .client_records import UNKNOWN, ClientRecord


class _Requests(Protocol):
    """What ``ClientInfo.used`` reads of a fold (``protocol.ApiStats``)."""

    requests: dict[tuple[int, int], int]


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
