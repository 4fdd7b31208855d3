"""The gateways' client records in the plan: who a client is (software, client id,
peer addresses, first/last seen), read from ``readers.read_clients``; absent (an older
gateway, a dataset without ``clients/``) the metric labels are all there is.
Plain Python over rows already on the driver (no Spark).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from .decide import CLIENT

Row = Mapping[str, Any]


def load_identities(metrics: str) -> list[dict[str, Any]]:
    """``readers.read_clients(metrics)``, or [] where the dataset (or this build) has none.

    Imported lazily: the reader lives beside the Spark readers, and a planner built
    before it exists still plans from the metric labels.
    """
    try:
        from featurectl.plan import readers
    except ImportError:  # no PySpark: nothing to read
        return []
    read = getattr(readers, "read_clients", None)
    if read is None:
        return []
    try:
        return list(read(metrics) or [])
    except (FileNotFoundError, NotADirectoryError):
        return []
    except Exception as exc:  # a damaged record must not cost the whole plan
        print(
            f"warning: client records under {metrics} unreadable ({exc!r}); "
            "naming clients by their metric labels only",
            file=sys.stderr,
        )
        return []


def to_ms(value: Any) -> int | None:
    """A time as the records may hold it (epoch s or ms, ISO text, datetime) in epoch ms."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(stamp.timestamp() * 1000)
    if isinstance(value, int | float):
        return int(value * 1000) if value < 1e11 else int(value)
    try:
        return to_ms(datetime.fromisoformat(str(value).replace("Z", "+00:00")))
    except ValueError:
        return None


def _key(row: Row) -> tuple[Any, Any]:
    """The (client_software_name, client_software_version) labels the gateway counted
    this client under: its KIP-511 software, or ``client-id:...`` without one."""
    name = row.get("identity") or row.get("software_name")
    version = row.get("identity_version") or row.get("software_version")
    return (name, version)


def identity_index(identities: Iterable[Row]) -> dict[tuple[Any, Any], dict[str, Any]]:
    """Per client software (name, version): client ids, peers and principals (most
    connections first), first and last seen, gateways and connections opened, over
    every gateway's record."""
    merged: dict[tuple[Any, Any], dict[str, Any]] = {}
    peers: dict[tuple[Any, Any], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    principals: dict[tuple[Any, Any], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in identities:
        key = _key(r)
        m = merged.setdefault(
            key,
            {
                "client_ids": set(),
                "gateways": set(),
                "fingerprints": set(),
                "first_seen": None,
                "last_seen": None,
                "connections_opened": 0,
                "bridged_requests": 0,
            },
        )
        if r.get("client_id"):
            m["client_ids"].add(str(r["client_id"]))
        if r.get("gateway_id"):
            m["gateways"].add(str(r["gateway_id"]))
        if r.get("fingerprint"):
            m["fingerprints"].add(str(r["fingerprint"]))
        opened = int(r.get("connections_opened") or 0)
        m["connections_opened"] += opened
        m["bridged_requests"] += int(r.get("bridged_requests") or 0)
        for peer in r.get("peers") or ():
            peers[key][str(peer)] += max(1, opened)
        counts = r.get("principal_connections") or ()
        for i, principal in enumerate(r.get("principals") or ()):
            principals[key][str(principal)] += int(counts[i]) if i < len(counts) else 1
        first, last = to_ms(r.get("first_seen")), to_ms(r.get("last_seen"))
        if first is not None:
            m["first_seen"] = first if m["first_seen"] is None else min(m["first_seen"], first)
        if last is not None:
            m["last_seen"] = last if m["last_seen"] is None else max(m["last_seen"], last)
    out = {}
    for key, m in merged.items():
        ranked = sorted(peers[key].items(), key=lambda item: (-item[1], item[0]))
        by_principal = sorted(principals[key].items(), key=lambda item: (-item[1], item[0]))
        out[key] = {
            **m,
            "client_ids": sorted(m["client_ids"]),
            "gateways": sorted(m["gateways"]),
            "fingerprints": sorted(m["fingerprints"]),
            "peers": [p for p, _ in ranked],
            "principals": [p for p, _ in by_principal],
        }
    return out


def who(row: Row, index: Mapping[tuple[Any, Any], Mapping[str, Any]]) -> dict[str, Any]:
    """The client ids, addresses and principals of a row's client software (empty when
    unknown)."""
    found = index.get(tuple(row.get(c) for c in CLIENT)) or {}
    return {
        "client_ids": list(found.get("client_ids", [])),
        "peers": list(found.get("peers", [])),
        "principals": list(found.get("principals", [])),
    }


def refusals_from_identities(identities: Iterable[Row]) -> list[dict[str, Any]]:
    """Refusal rows from the client records' ``versions_refused`` (when the refusal
    counter has no API or client labels, the records still say who and what)."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in identities:
        for v in r.get("versions_refused") or ():
            key = (v.get("reason"), v.get("api_key"), v.get("api"), v.get("api_version"), *_key(r))
            g = groups.setdefault(
                key,
                {
                    **dict(
                        zip(
                            ("reason", "api_key", "api", "api_version", *CLIENT),
                            key,
                            strict=True,
                        )
                    ),
                    "requests": 0.0,
                    "first_seen": None,
                    "last_seen": None,
                    "gateways": set(),
                },
            )
            g["requests"] += float(v.get("count") or 0)
            g["gateways"].add(r.get("gateway_id"))
            first, last = to_ms(r.get("first_seen")), to_ms(r.get("last_seen"))
            if first is not None and (g["first_seen"] is None or first < g["first_seen"]):
                g["first_seen"] = first
            if last is not None and (g["last_seen"] is None or last > g["last_seen"]):
                g["last_seen"] = last
    return [
        {**g, "gateways": sorted(x for x in g["gateways"] if x)}
        for g in groups.values()
        if g["requests"] > 0
    ]


def attributed(row: Row) -> bool:
    """Whether a refusal says which API version it was (labels from a newer gateway)."""
    return row.get("api_key") not in (None, -1) and row.get("api_version") not in (None, -1)
