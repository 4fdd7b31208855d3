"""The client identities half of the dataset: each gateway's /clients, as Parquet.

::

    DIR/clients/date=YYYY-MM-DD/part-<first>-<written>-<pid>-<n>.parquet

``featurectl collect`` fetches every gateway's /clients (``gateway.client_records``) next
to its /metrics each round, keeps the newest answer per gateway, and writes, when it
flushes its samples, one row per identity whose record changed since the last write
(an idle fleet adds no rows). A row is one identity of one gateway process at one scrape
(``ROW_FIELDS``); counts are the process's since it first saw the identity, so the newest
row of an identity says it all (``read_client_rows`` keeps that one, with the earliest
first_seen of any).

Addresses live only here and on /clients, never in the metrics' labels.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .layout import stamp

CLIENTS = "clients"
PARQUET_SUFFIX = ".parquet"
DATE_PARTITION = "date"

# The fields of a row, in order, as ``read_client_rows`` returns them.
ROW_FIELDS = (
    "gateway_id",  # str: the gateway (process or supervisor) that served the record
    "scraped_at",  # float: epoch seconds of the /clients fetch
    "software_name",  # str: KIP-511 client software name, or "unknown"
    "software_version",  # str: KIP-511 client software version, or "unknown"
    "client_id",  # str: the client id ("" when the client sent none)
    "identity",  # str: the client_software_name label its metric series carry
    "identity_version",  # str: the client_software_version label its series carry
    "fingerprint",  # str: hash of the (api_key, api_version) set it used ("" if none)
    "peers",  # list[str]: the top addresses (IPs) it connected from, most first
    "peer_connections",  # list[int]: connections opened from each of ``peers``
    "principals",  # list[str]: the top principals ("User:...") it logged in as, most first
    "principal_connections",  # list[int]: its connections that had each of ``principals``
    "connections_opened",  # int: connections opened (short-lived and refused included)
    "connections_active",  # int: connections open at the scrape
    "first_seen",  # float: epoch seconds
    "last_seen",  # float: epoch seconds
    "versions_used",  # list[{api_key:int, api:str, api_version:int, count:int}]
    "versions_refused",  # list[{api_key, api, api_version, reason:str, count}]
    "bridged_requests",  # int: its requests the version bridge carried (gateway.bridge)
)

_files = itertools.count()


def arrow_schema() -> Any:
    import pyarrow as pa

    used = pa.struct(
        [
            ("api_key", pa.int32()),
            ("api", pa.string()),
            ("api_version", pa.int32()),
            ("count", pa.int64()),
        ]
    )
    refused = pa.struct(
        [
            ("api_key", pa.int32()),
            ("api", pa.string()),
            ("api_version", pa.int32()),
            ("reason", pa.string()),
            ("count", pa.int64()),
        ]
    )
    return pa.schema(
        [
            ("gateway_id", pa.string()),
            ("scraped_at", pa.timestamp("ms", tz="UTC")),
            ("software_name", pa.string()),
            ("software_version", pa.string()),
            ("client_id", pa.string()),
            ("identity", pa.string()),
            ("identity_version", pa.string()),
            ("fingerprint", pa.string()),
            ("peers", pa.list_(pa.string())),
            ("peer_connections", pa.list_(pa.int64())),
            ("principals", pa.list_(pa.string())),
            ("principal_connections", pa.list_(pa.int64())),
            ("connections_opened", pa.int64()),
            ("connections_active", pa.int64()),
            ("first_seen", pa.float64()),
            ("last_seen", pa.float64()),
            ("versions_used", pa.list_(used)),
            ("versions_refused", pa.list_(refused)),
            ("bridged_requests", pa.int64()),
        ]
    )


def row_of(gateway_id: str, scraped_ms: int, record: Mapping[str, Any]) -> dict[str, Any]:
    """One /clients record as a row of the Parquet schema (``scraped_at`` in ms)."""
    peers = record.get("peers") or []
    principals = record.get("principals") or []  # absent from older gateways' records
    return {
        "gateway_id": gateway_id,
        "scraped_at": scraped_ms,
        "software_name": str(record.get("software_name", "unknown")),
        "software_version": str(record.get("software_version", "unknown")),
        "client_id": str(record.get("client_id") or ""),
        "identity": str(record.get("identity", "unknown")),
        "identity_version": str(record.get("identity_version", "unknown")),
        "fingerprint": str(record.get("fingerprint", "")),
        "peers": [str(p["ip"]) for p in peers],
        "peer_connections": [int(p.get("connections", 0)) for p in peers],
        "principals": [str(p["principal"]) for p in principals],
        "principal_connections": [int(p.get("connections", 0)) for p in principals],
        "connections_opened": int(record.get("connections_opened", 0)),
        "connections_active": int(record.get("connections_active", 0)),
        "first_seen": float(record.get("first_seen", 0.0)),
        "last_seen": float(record.get("last_seen", 0.0)),
        "versions_used": [
            {
                "api_key": int(u["api_key"]),
                "api": str(u["api"]),
                "api_version": int(u["api_version"]),
                "count": int(u["count"]),
            }
            for u in record.get("versions_used") or []
        ],
        "versions_refused": [
            {
                "api_key": int(r["api_key"]),
                "api": str(r["api"]),
                "api_version": int(r["api_version"]),
                "reason": str(r["reason"]),
                "count": int(r["count"]),
            }
            for r in record.get("versions_refused") or []
        ],
        "bridged_requests": int(record.get("bridged_requests", 0)),
    }


def _identity_key(row: Mapping[str, Any]) -> tuple[str, str, str, str]:
    return (row["gateway_id"], row["software_name"], row["software_version"], row["client_id"])


def _state(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes a row worth writing again: anything but the scrape time."""
    return (
        row["last_seen"],
        row["connections_opened"],
        row["connections_active"],
        row["identity"],
        row["identity_version"],
        tuple(row["peers"]),
        tuple(row["peer_connections"]),
        tuple(row["principals"]),
        tuple(row["principal_connections"]),
        tuple(tuple(u.values()) for u in row["versions_used"]),
        tuple(tuple(r.values()) for r in row["versions_refused"]),
        row["bridged_requests"],
    )


class ClientSink:
    """Keeps each gateway's newest /clients; ``flush`` writes the identities that
    changed since the last flush (one file per UTC day touched)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._latest: dict[str, tuple[int, list[Mapping[str, Any]]]] = {}
        self._written: dict[tuple[str, str, str, str], tuple[Any, ...]] = {}
        self.written: list[Path] = []

    def add(self, gateway_id: str, scraped_ms: int, records: list[Mapping[str, Any]]) -> None:
        self._latest[gateway_id] = (scraped_ms, records)

    def flush(self) -> list[Path]:
        rows = []
        for gateway_id, (scraped_ms, records) in self._latest.items():
            for record in records:
                row = row_of(gateway_id, scraped_ms, record)
                key, state = _identity_key(row), _state(row)
                if self._written.get(key) != state:
                    self._written[key] = state
                    rows.append(row)
        self._latest = {}
        if not rows:
            return []
        paths = write_rows(self.root, rows)
        self.written.extend(paths)
        return paths


def write_rows(root: Path, rows: list[dict[str, Any]]) -> list[Path]:
    """Write ``rows`` (``scraped_at`` in ms) under ``root/clients``, a file per day."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    by_day: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        day = datetime.fromtimestamp(row["scraped_at"] / 1000, UTC).strftime("%Y-%m-%d")
        by_day.setdefault(day, []).append(row)
    paths = []
    for day, part in sorted(by_day.items()):
        part.sort(key=lambda r: (r["gateway_id"], r["scraped_at"]))
        table = pa.Table.from_pylist(part, schema=arrow_schema())
        directory = Path(root) / CLIENTS / f"{DATE_PARTITION}={day}"
        directory.mkdir(parents=True, exist_ok=True)
        first = datetime.fromtimestamp(part[0]["scraped_at"] / 1000, UTC)
        name = (
            f"part-{stamp(first)}-{stamp(datetime.now(UTC))}-{os.getpid()}-{next(_files):04d}"
            f"{PARQUET_SUFFIX}"
        )
        # A dot name while writing: readers skip hidden files, never see half a file.
        tmp = directory / f".{name}.tmp"
        pq.write_table(table, tmp, compression="zstd")
        path = directory / name
        tmp.replace(path)
        paths.append(path)
    return paths


def read_client_rows(root: str | Path) -> list[dict[str, Any]]:
    """Every identity of every gateway in ``root/clients``: the newest row of each
    (gateway_id, software_name, software_version, client_id), with ``first_seen`` the
    earliest of its rows and ``scraped_at`` in epoch seconds; [] without the directory.
    Sorted by gateway and last_seen."""
    directory = Path(str(root).removeprefix("file://")) / CLIENTS
    files = sorted(p for p in directory.glob(f"*/*{PARQUET_SUFFIX}") if not p.name.startswith("."))
    if not files:
        return []
    import pyarrow.parquet as pq

    newest: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    first_seen: dict[tuple[str, str, str, str], float] = {}
    for path in files:
        for row in pq.read_table(path, schema=arrow_schema()).to_pylist():
            row["scraped_at"] = row["scraped_at"].timestamp()
            # Files written before principals were recorded read them as null.
            row["principals"] = row["principals"] or []
            row["principal_connections"] = row["principal_connections"] or []
            row["bridged_requests"] = row["bridged_requests"] or 0  # and before the bridge
            key = _identity_key(row)
            first_seen[key] = min(first_seen.get(key, row["first_seen"]), row["first_seen"])
            mine = newest.get(key)
            if mine is None or (row["scraped_at"], row["last_seen"]) >= (
                mine["scraped_at"],
                mine["last_seen"],
            ):
                newest[key] = row
    out = []
    for key, row in newest.items():
        row["first_seen"] = first_seen[key]
        out.append({name: row[name] for name in ROW_FIELDS})
    out.sort(key=lambda r: (r["gateway_id"], r["last_seen"]))
    return out


def rows_from(records: Iterable[Mapping[str, Any]], gateway_id: str, scraped_ms: int) -> list:
    """/clients records as rows (tests, and anything that writes without ``collect``)."""
    return [row_of(gateway_id, scraped_ms, record) for record in records]


__all__ = [
    "CLIENTS",
    "ROW_FIELDS",
    "ClientSink",
    "arrow_schema",
    "read_client_rows",
    "row_of",
    "rows_from",
    "write_rows",
]
