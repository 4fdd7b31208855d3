"""What report.md and report.html both say: the summary, the notes on the evidence and
the tables, as plain text and rows that each format lays out its own way.

Works on the plan.json document, so both reports say exactly what the plan says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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

Table = tuple[list[str], list[tuple[Any, ...]]]


def notes(doc: Mapping[str, Any]) -> list[str]:
    """Warnings about the evidence the plan rests on (shown above the verdicts)."""
    said = []
    if doc["state"]["source"] == "metrics":
        said.append(
            "No ZooKeeper and no state snapshot: live gateways and finalized levels come from "
            "the gateways' own gauges at their last scrape. Pass --zookeeper for the live "
            "registry."
        )
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
        ["feature", "change", "kind", "safe now", "blocking gateways", "blocking clients"],
        [
            (
                v["feature"],
                f"{v['current_level']} → {v['level']}",
                v["kind"],
                "yes" if v["safe"] else unsafe,
                ", ".join(v["blocking_gateways"]) or "-",
                ", ".join(client_label(c) for c in v["blocking_clients"]) or "-",
            )
            for v in doc["verdicts"]
        ],
    )


def feature_table(doc: Mapping[str, Any]) -> Table:
    return (
        [
            "feature",
            "finalized",
            "highest level every live gateway supports",
            "catalogue max",
            "gateways",
        ],
        [
            (
                f["feature"],
                f["finalized_level"],
                f["cluster_max_level"],
                f["catalogue_max_level"],
                f["live_gateways"],
            )
            for f in doc["features"]
        ],
    )


def client_table(clients: Sequence[Mapping[str, Any]]) -> Table:
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
                c["first_seen"],
                c["last_seen"],
                len(c["gateways"]),
            )
            for c in clients[:REPORT_CLIENT_ROWS]
        ],
    )


__all__ = [
    "CLIENTS_INTRO",
    "NOTHING_TO_PLAN",
    "NO_GATED_CLIENTS",
    "REPORT_CLIENT_ROWS",
    "Table",
    "client_table",
    "feature_table",
    "notes",
    "summary",
    "verdict_table",
]
