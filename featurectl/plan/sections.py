"""What report.md and report.html both say: the summary, the notes on the evidence and
the tables, as plain text and rows that each format lays out its own way.

Works on the plan.json document, so both reports say exactly what the plan says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from featurectl.features import withheld_line
from featurectl.plan.caps import capped_summary
from featurectl.plan.clients import NEGOTIATION
from featurectl.plan.decide import client_label

# Rows of the clients table in the reports (plan.json has all of them).
REPORT_CLIENT_ROWS = 40

NOTHING_TO_PLAN = (
    "No target given and every feature is already finalized at the highest level all live "
    "gateways support."
)
NO_GATED_CLIENTS = "No client used a gated API version."
CLIENTS_INTRO = (
    "API versions that need a finalized level; a downgrade below that level withdraws them. "
    "requests counts increases of kafka_gateway_requests_total in the window (resets "
    "handled); last seen "
    "is the last scrape where the count grew."
)

BROKEN_INTRO = (
    "Requests the gateways refused in the window that no feature level fixes, by client: "
    "these clients are failing now (kafka_gateway_rejected_requests_total)."
)
NOTHING_BROKEN = "No request was refused in the window."
WANTING_INTRO = (
    "Clients refused an API version a feature level would give them (for example KIP-848 "
    "consumers refused ConsumerGroupHeartbeat): the level, and what it takes."
)
NOBODY_WANTING = "No client was refused an API version that a feature level would give it."
LOSSES_INTRO = (
    "Per target below the finalized level: which clients negotiated API versions it "
    "withholds, and what happens to them."
)
VERSIONS_INTRO = (
    "Every API version each client software used in the window (* needs a feature level), "
    "with what it was refused."
)
NO_IDENTITIES = (
    "The dataset has no client records (gateways or a collect from before them): clients "
    "are named by their software labels only, without client ids or addresses, and first "
    "seen is the first sample in the window where a client's count grew."
)
# Addresses and client ids shown per row (plan.json has all of them).
SHOWN = 3

Table = tuple[list[str], list[tuple[Any, ...]]]


def some(values: Sequence[Any] | None) -> str:
    values = list(values or [])
    if not values:
        return "-"
    more = f" (+{len(values) - SHOWN})" if len(values) > SHOWN else ""
    return ", ".join(str(v) for v in values[:SHOWN]) + more


def _client(row: Mapping[str, Any]) -> str:
    name = row.get("client_software_name")
    if name is None:
        return "(not labelled)"
    return client_label(row)


def _first_seen(value: Any, start: str | None) -> Any:
    """A first-seen time at the window's start was seen before it: say so."""
    if value is not None and start is not None and value <= start:
        return f"≤ {value} (before the window)"
    return value


def notes(doc: Mapping[str, Any]) -> list[str]:
    """Warnings about the evidence the plan rests on (shown above the verdicts)."""
    said = []
    if doc["state"]["source"] == "metrics":
        said.append(
            "No ZooKeeper and no state snapshot: live gateways and finalized levels come from "
            "the gateways' own gauges at their last scrape. Pass --zookeeper for the live "
            "registry."
        )
    if not doc.get("identities") and doc.get("api_versions_by_client") is not None:
        said.append(NO_IDENTITIES)
    negotiated = doc.get("negotiated") or []
    if negotiated:
        who = sorted({_client(r) for r in negotiated})
        total = sum(r.get("requests") or 0.0 for r in negotiated)
        said.append(f"{total:,.0f} {NEGOTIATION} (clients: {some(who)})")
    if any(g["scrapes"] < 2 for g in doc["dataset"]["gateway_spans"]):
        said.append(
            "Some gateways were scraped only once: their request counts are totals since the "
            "gateway started, not use within a window. Collect for longer (featurectl collect "
            "--rounds N) to see who still uses an API version."
        )
    return said


def summary(doc: Mapping[str, Any]) -> tuple[str, str]:
    """The two lines that say what the plan was made from (plain text)."""
    ds, state = doc["dataset"], doc["state"]
    made = (
        f"Generated {doc['generated_at']} from {ds['path']}: {ds['samples']:,} samples, "
        f"{ds['gateways']} gateway(s), {ds['scrapes']} scrape(s), {ds['start']} to {ds['end']}."
    )
    live = (
        f"State (finalized levels, live gateways) from {state['source']}"
        + (f" at {state['time']}" if state.get("time") else "")
        + f"; finalized epoch {state['epoch']}; {len(state['gateway_ids'])} live gateway(s)."
    )
    return made, live


def verdict_table(doc: Mapping[str, Any], unsafe: str = "no") -> Table:
    return (
        [
            "feature",
            "change",
            "kind",
            "safe now",
            "blocking gateways",
            "blocking clients",
            "clients that reconnect",
        ],
        [
            (
                v["feature"],
                f"{v['current_level']} → {v['level']}",
                v["kind"],
                "yes" if v["safe"] else unsafe,
                ", ".join(v["blocking_gateways"]) or "-",
                ", ".join(client_label(c) for c in v["blocking_clients"]) or "-",
                ", ".join(client_label(c) for c in v.get("reconnecting_clients", [])) or "-",
            )
            for v in doc["verdicts"]
        ],
    )


def feature_table(doc: Mapping[str, Any]) -> Table:
    capped = {
        f["feature"]: capped_summary(f["capped_by"], f["feature"], f["cluster_max_level"] + 1)
        for f in doc["features"]
        if f.get("capped_by")
    }
    return (
        [
            "feature",
            "finalized",
            "highest level every live gateway supports",
            "catalogue max",
            "gateways",
            "capped by",
            "brokers finalized",
        ],
        [
            (
                f["feature"],
                f["finalized_level"],
                f["cluster_max_level"],
                f["catalogue_max_level"],
                f["live_gateways"],
                capped.get(f["feature"], "-"),
                "-" if f.get("broker_finalized_level") is None else f["broker_finalized_level"],
            )
            for f in doc["features"]
        ],
    )


def withheld_notes(doc: Mapping[str, Any]) -> list[str]:
    """A line per feature the brokers finalized above what the gateways hold."""
    return [
        withheld_line(
            f["feature"], f["broker_finalized_level"], f["finalized_level"], f["cluster_max_level"]
        )
        for f in doc["features"]
        if (f.get("broker_finalized_level") or 0) > f["finalized_level"]
    ]


# The columns broken_table and wanting_table start with: who was refused what, how often.
_REFUSAL_COLUMNS = (
    "client software",
    "client ids",
    "addresses",
    "principals",
    "API",
    "version",
    "reason",
    "refused",
)


def _refusal(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """A refusal row's _REFUSAL_COLUMNS. API and version are "-" where the gateway's counter
    did not say them (only broken-now rows: a wanting row always says both)."""
    return (
        _client(r),
        some(r.get("client_ids")),
        some(r.get("peers")),
        some(r.get("principals")),
        r.get("api") or "-",
        "-" if r.get("api_version") in (None, -1) else r["api_version"],
        r["reason"],
        f"{r['requests']:,.0f}",
    )


def broken_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    return (
        [*_REFUSAL_COLUMNS, "gateways", "last refused", "remedy"],
        [
            (*_refusal(r), some(r.get("gateways")), r.get("last_seen"), r["remedy"])
            for r in rows[:REPORT_CLIENT_ROWS]
        ],
    )


def wanting_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    return (
        [*_REFUSAL_COLUMNS, "needs", "what it takes", "command"],
        [
            (*_refusal(r), f"{r['feature']}={r['level']}", r["remedy"], r.get("command") or "-")
            for r in rows[:REPORT_CLIENT_ROWS]
        ],
    )


def losses_table(doc: Mapping[str, Any]) -> Table:
    return (
        [
            "target",
            "client software",
            "client ids",
            "addresses",
            "principals",
            "API",
            "versions used",
            "allowed after",
            "requests",
            "remedy",
        ],
        [
            (
                f"{v['feature']} {v['current_level']} → {v['level']}",
                _client(x),
                some(x.get("client_ids")),
                some(x.get("peers")),
                some(x.get("principals")),
                x["api"],
                ", ".join(f"v{n}" for n in x["versions"]),
                "none" if x["allowed_max"] < 0 else f"v{x['allowed_max']} and lower",
                f"{x['requests']:,.0f}",
                x["remedy_text"],
            )
            for v in doc["verdicts"]
            for x in v.get("losses", [])
        ],
    )


def versions_table(doc: Mapping[str, Any]) -> Table:
    start = doc["dataset"].get("start")
    return (
        [
            "client software",
            "client ids",
            "addresses",
            "principals",
            "API versions used",
            "requests",
            "first seen",
            "last seen",
            "gateways",
            "refused",
        ],
        [
            (
                _client(c),
                some(c.get("client_ids")),
                some(c.get("peers")),
                some(c.get("principals")),
                "; ".join(f"{a['api']} {','.join(a['versions'])}" for a in c["apis"]) or "-",
                f"{c['requests']:,.0f}",
                _first_seen(c.get("first_seen"), start),
                c.get("last_seen"),
                len(c.get("gateways", [])),
                "; ".join(c.get("refused", [])) or "-",
            )
            for c in doc.get("api_versions_by_client", [])[:REPORT_CLIENT_ROWS]
        ],
    )


def client_table(clients: Sequence[Mapping[str, Any]], start: str | None = None) -> Table:
    return (
        [
            "feature",
            "level",
            "API",
            "version",
            "client software",
            "requests",
            "connections now",
            "peak",
            "first seen",
            "last seen",
            "gateways",
        ],
        [
            (
                c["feature"],
                c["level"],
                c["api"],
                c["api_version"],
                client_label(c),
                f"{c['requests']:,.0f}",
                f"{c['connections_now']:g}",
                f"{c['connections_peak']:g}",
                _first_seen(c["first_seen"], start),
                c["last_seen"],
                len(c["gateways"]),
            )
            for c in clients[:REPORT_CLIENT_ROWS]
        ],
    )


__all__ = [
    "BROKEN_INTRO",
    "CLIENTS_INTRO",
    "LOSSES_INTRO",
    "NOBODY_WANTING",
    "NOTHING_BROKEN",
    "NOTHING_TO_PLAN",
    "NO_GATED_CLIENTS",
    "NO_IDENTITIES",
    "REPORT_CLIENT_ROWS",
    "VERSIONS_INTRO",
    "WANTING_INTRO",
    "Table",
    "broken_table",
    "client_table",
    "feature_table",
    "losses_table",
    "notes",
    "some",
    "summary",
    "verdict_table",
    "versions_table",
    "wanting_table",
    "withheld_notes",
]
