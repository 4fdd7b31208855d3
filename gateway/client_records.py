"""Who, where, since when: a bounded record of the client identities a gateway process saw
(pure, no I/O; served as JSON on /clients).

A connection is attributed to one identity once: when its first request names its client
id, when ApiVersions v3+ names its KIP-511 software, or when it closes (short-lived and
refused connections count too). The record is keyed by (software name, software version,
client id) and holds what an operator asks about a client: which addresses it comes
from and as which principals it logged in (the top few of each, never as metric
labels), since when, how many connections it opened,
which API versions it used and which were refused, and why.

Clients that announce no KIP-511 software (kafka-python, aiokafka, librdkafka before
KIP-511, ...) are labelled in metrics by their client id, made bounded
(``identity_of_client_id``): "client-id:producer" for "producer-1", "producer-2", ...

Everything runs on the event loop thread: no locks. The record is bounded by
``max_client_identities``: past it, the identity seen least recently (preferring one with
no live connection) is dropped.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .protocol import api_name, api_spec

UNKNOWN = "unknown"
# The label value prefix of an identity derived from the client id.
CLIENT_ID_PREFIX = "client-id:"
# Versions above this (or below 0) of a known key, and keys the gateway does not know,
# are counted as api_key=-1/api_version=-1: label values stay bounded.
MAX_LABELLED_VERSION = 127
# Peer addresses reported per identity, by connection count ...
TOP_PEERS = 5
# ... out of this many kept (the least used is replaced by a new one when all are taken).
PEER_SLOTS = 16
# The longest derived identity label (after "client-id:").
MAX_IDENTITY_CHARS = 64
DEFAULT_MAX_IDENTITIES = 1000

_UUID = re.compile(
    r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
)
# A long run of hex digits with at least one digit (an instance id, a hash).
_HEX_ID = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-fA-F]*[0-9])[0-9a-fA-F]{12,}(?![0-9A-Za-z])")
# Per-instance counters and process ids: "producer-1", "consumer-group-3", "app_12345".
_TRAILING_NUMBER = re.compile(r"[-_]\d+$")
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def api_labels(api_key: int, api_version: int) -> tuple[int, int]:
    """The (api_key, api_version) a request is counted under: its own when the key is
    known and the version in 0..MAX_LABELLED_VERSION, else (-1, -1)."""
    if 0 <= api_version <= MAX_LABELLED_VERSION and api_spec(api_key) is not None:
        return api_key, api_version
    return -1, -1


def identity_of_client_id(client_id: str | None) -> str | None:
    """The bounded label of a client known only by its client id, or None without one.

    Per-instance parts are dropped so that every instance of one application shares a
    label: trailing counters and process ids ("producer-1" -> "producer"), UUIDs and
    long hex ids ("*"). A version stays ("kafka-python-2.0.2"): it tells libraries apart.
    """
    if client_id is None:
        return None
    text = _UNPRINTABLE.sub("?", client_id.strip())
    text = _HEX_ID.sub("*", _UUID.sub("*", text))
    while True:
        stripped = _TRAILING_NUMBER.sub("", text)
        if stripped == text or not stripped:
            break
        text = stripped
    if not text:
        return None
    return CLIENT_ID_PREFIX + text[:MAX_IDENTITY_CHARS]


def peer_ip(peer: str) -> str:
    """The address of a "host:port" peer ("[::1]:5" and "::1:5" give "::1")."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return host.strip("[]") or peer


def fingerprint(versions: Iterable[tuple[int, int]]) -> str:
    """A short stable hash of the set of (api_key, api_version) a client used: equal
    for clients whose libraries speak alike; "" for none."""
    keys = sorted(set(versions))
    if not keys:
        return ""
    text = ",".join(f"{key}.{version}" for key, version in keys)
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:12]


Key = tuple[str, str, str]  # (software name, software version, client id or "")


def _count_in_slots(counts: dict[str, int], value: str) -> None:
    """Count ``value`` in ``counts``, which keeps PEER_SLOTS values at most: when all
    are taken, the least counted makes room (its count is lost)."""
    if value in counts or len(counts) < PEER_SLOTS:
        counts[value] = counts.get(value, 0) + 1
        return
    del counts[min(counts, key=counts.__getitem__)]
    counts[value] = 1


def _top(counts: dict[str, int]) -> list[tuple[str, int]]:
    """The TOP_PEERS values counted most, most first (ties by value)."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:TOP_PEERS]


class ClientRecord:
    """One identity: its software, client id, addresses, lifetime and versions."""

    __slots__ = (
        "bridged",
        "client_id",
        "connections_active",
        "connections_opened",
        "first_seen",
        "identity",
        "identity_version",
        "key",
        "last_seen",
        "peers",
        "principals",
        "refused",
        "software_name",
        "software_version",
        "used",
    )

    def __init__(self, key: Key, labels: tuple[str, str], now: float) -> None:
        self.key = key
        self.software_name, self.software_version, self.client_id = key
        # The client_software_name/version labels its metric series carry.
        self.identity, self.identity_version = labels
        self.first_seen = self.last_seen = now
        self.connections_opened = 0
        self.connections_active = 0
        self.peers: dict[str, int] = {}  # ip -> connections opened from it
        # principal ("User:...") -> connections that had it (TLS or a SASL login)
        self.principals: dict[str, int] = {}
        self.used: dict[tuple[int, int], int] = {}  # (api_key, api_version) -> requests
        self.refused: dict[tuple[int, int, str], int] = {}  # (key, version, reason) -> count
        self.bridged = 0  # requests the version bridge converted (gateway.bridge)

    def opened(self, ip: str) -> None:
        self.connections_opened += 1
        self.connections_active += 1
        _count_in_slots(self.peers, ip)

    def add_principal(self, principal: str) -> None:
        """A connection of this identity is ``principal``'s."""
        _count_in_slots(self.principals, principal)

    def unopened(self, ip: str) -> None:
        """Take back ``opened`` (a connection that turned out to be another identity)."""
        self.connections_opened = max(0, self.connections_opened - 1)
        self.connections_active = max(0, self.connections_active - 1)
        count = self.peers.get(ip)
        if count is not None:
            if count > 1:
                self.peers[ip] = count - 1
            else:
                del self.peers[ip]

    def add_used(self, requests: Mapping[tuple[int, int], int]) -> None:
        used = self.used
        for (key, version), count in requests.items():
            label = api_labels(key, version)
            used[label] = used.get(label, 0) + count

    def add_refused(self, key: int, version: int, reason: str, count: int = 1) -> None:
        label = (*api_labels(key, version), reason)
        self.refused[label] = self.refused.get(label, 0) + count

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view; ``peers`` and ``principals`` the top TOP_PEERS by
        connections."""
        return {
            "software_name": self.software_name,
            "software_version": self.software_version,
            "client_id": self.client_id,
            "identity": self.identity,
            "identity_version": self.identity_version,
            "fingerprint": fingerprint(self.used),
            "peers": [{"ip": ip, "connections": count} for ip, count in _top(self.peers)],
            "principals": [
                {"principal": principal, "connections": count}
                for principal, count in _top(self.principals)
            ],
            "connections_opened": self.connections_opened,
            "connections_active": self.connections_active,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "versions_used": [
                {"api_key": k, "api": api_name(k), "api_version": v, "count": count}
                for (k, v), count in sorted(self.used.items())
            ],
            "versions_refused": [
                {"api_key": k, "api": api_name(k), "api_version": v, "reason": r, "count": count}
                for (k, v, r), count in sorted(self.refused.items())
            ],
            "bridged_requests": self.bridged,
        }


class ClientRecords:
    """The bounded record: identities by key, least recently seen first."""

    __slots__ = ("_clock", "_records", "evicted", "limit")

    def __init__(
        self, limit: int = DEFAULT_MAX_IDENTITIES, clock: Callable[[], float] = time.time
    ) -> None:
        self.limit = limit
        self._clock = clock
        self._records: OrderedDict[Key, ClientRecord] = OrderedDict()
        self.evicted = 0  # identities dropped to stay within ``limit``

    def __len__(self) -> int:
        return len(self._records)

    def get(self, key: Key) -> ClientRecord | None:
        return self._records.get(key)

    def record(self, key: Key, labels: tuple[str, str]) -> ClientRecord:
        """The record of ``key`` (made if new), marked seen now."""
        record = self._records.get(key)
        if record is None:
            record = ClientRecord(key, labels, self._clock())
            self._records[key] = record
            self._bound()
        else:
            self.seen(record)
        return record

    def seen(self, record: ClientRecord) -> None:
        """``record`` was active now (an evicted one that is still in use comes back)."""
        record.last_seen = self._clock()
        if self._records.get(record.key) is record:
            self._records.move_to_end(record.key)
        else:
            self._records[record.key] = record
            self._bound()

    def _bound(self) -> None:
        records = self._records
        while len(records) > max(1, self.limit):
            newest = next(reversed(records))
            # The least recently seen without a live connection; else the least recent.
            victim = next(
                (k for k, r in records.items() if not r.connections_active and k != newest),
                next(iter(records)),
            )
            del records[victim]
            self.evicted += 1

    def snapshot(self) -> list[dict[str, Any]]:
        """Every identity as a JSON-ready dict, least recently seen first."""
        return [record.as_dict() for record in self._records.values()]


def merge_snapshots(parts: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Several processes' ``snapshot``s (a supervisor's workers) as one: the records of
    one identity summed, peers and versions merged, first/last seen widened."""
    merged: dict[Key, dict[str, Any]] = {}
    peers: dict[Key, dict[str, int]] = {}
    principals: dict[Key, dict[str, int]] = {}
    used: dict[Key, dict[tuple[int, str, int], int]] = {}
    refused: dict[Key, dict[tuple[int, str, int, str], int]] = {}
    for part in parts:
        for entry in part:
            key = (entry["software_name"], entry["software_version"], entry["client_id"])
            mine = merged.get(key)
            if mine is None:
                merged[key] = mine = dict(entry)
                mine["connections_opened"] = mine["connections_active"] = 0
                mine["bridged_requests"] = 0
                peers[key], principals[key], used[key], refused[key] = {}, {}, {}, {}
            elif entry["last_seen"] >= mine["last_seen"]:
                mine["identity"] = entry["identity"]
                mine["identity_version"] = entry["identity_version"]
            mine["connections_opened"] += entry["connections_opened"]
            mine["connections_active"] += entry["connections_active"]
            mine["bridged_requests"] += entry.get("bridged_requests", 0)
            mine["first_seen"] = min(mine["first_seen"], entry["first_seen"])
            mine["last_seen"] = max(mine["last_seen"], entry["last_seen"])
            for peer in entry["peers"]:
                peers[key][peer["ip"]] = peers[key].get(peer["ip"], 0) + peer["connections"]
            for p in entry.get("principals", ()):  # absent from older gateways' records
                mine_p = principals[key]
                mine_p[p["principal"]] = mine_p.get(p["principal"], 0) + p["connections"]
            for u in entry["versions_used"]:
                k = (u["api_key"], u["api"], u["api_version"])
                used[key][k] = used[key].get(k, 0) + u["count"]
            for r in entry["versions_refused"]:
                k2 = (r["api_key"], r["api"], r["api_version"], r["reason"])
                refused[key][k2] = refused[key].get(k2, 0) + r["count"]
    out = []
    for key, mine in merged.items():
        mine["peers"] = [{"ip": ip, "connections": count} for ip, count in _top(peers[key])]
        mine["principals"] = [
            {"principal": principal, "connections": count}
            for principal, count in _top(principals[key])
        ]
        mine["versions_used"] = [
            {"api_key": k, "api": a, "api_version": v, "count": c}
            for (k, a, v), c in sorted(used[key].items())
        ]
        mine["versions_refused"] = [
            {"api_key": k, "api": a, "api_version": v, "reason": r, "count": c}
            for (k, a, v, r), c in sorted(refused[key].items())
        ]
        mine["fingerprint"] = fingerprint((k, v) for k, _, v in used[key])
        out.append(mine)
    out.sort(key=lambda entry: entry["last_seen"])
    return out


__all__ = [
    "CLIENT_ID_PREFIX",
    "DEFAULT_MAX_IDENTITIES",
    "MAX_LABELLED_VERSION",
    "TOP_PEERS",
    "ClientRecord",
    "ClientRecords",
    "api_labels",
    "fingerprint",
    "identity_of_client_id",
    "merge_snapshots",
    "peer_ip",
]
