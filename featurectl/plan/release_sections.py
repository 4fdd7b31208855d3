"""What report.md and report.html say of each ``--release``: the "release X readiness"
section as intro text and tables (``sections.Table``), from the plan.json document."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from featurectl.plan.decide import client_label
from featurectl.plan.sections import REPORT_CLIENT_ROWS, Table, some

READINESS_INTRO = (
    "Every API version each client used in the window that Kafka {release} refuses (below "
    "the minimum its brokers accept; Produce v0-2 from 4.0, KIP-896, although advertised) "
    "or lacks, the version it needs instead and the first release of its library that "
    "speaks it (featurectl/data/client_libraries.json: approximate where marked). Then the "
    "gateways too old for it, the levels 'upgrade --release-version {release}' finalizes, "
    "and the steps in order."
)


def title(release: Mapping[str, Any]) -> str:
    return f"Kafka {release['release']} readiness"


def verdict_line(release: Mapping[str, Any]) -> str:
    broken = [c for c in release["clients"] if c["verdict"].startswith("breaks")]
    old = [g for g in release["gateways"] if not g["ready"]]
    if release["safe"]:
        return f"Safe: no client used a version Kafka {release['release']} refuses."
    return (
        f"Not safe yet: {len(broken)} client(s) break on {release['release']}, "
        f"{len(old)} gateway(s) to upgrade first."
    )


def client_rows(release: Mapping[str, Any]) -> Table:
    return (
        ["client software", "library", "client ids", "addresses", "verdict", "refused",
         "first library release", "remedy", "gateways"],
        [
            (
                client_label(c),
                " ".join(x for x in (c.get("library"), c.get("library_version")) if x) or "-",
                some(c.get("client_ids")),
                some(c.get("peers")),
                c["verdict"],
                "; ".join(_refused(r) for r in c["refused"]) or "-",
                "; ".join(r["first_release"] or "-" for r in c["refused"]) or "-",
                "; ".join(r["remedy"] for r in c["refused"]) or "-",
                some(c.get("gateways")),
            )
            for c in release["clients"][:REPORT_CLIENT_ROWS]
        ],
    )  # fmt: skip


def _refused(r: Mapping[str, Any]) -> str:
    if r["needs"] is None:
        return f"{r['api']} v{r['api_version']} (no version left)"
    return f"{r['api']} v{r['api_version']} → v{r['needs']} ({r['requests']:,.0f} requests)"


def gateway_rows(release: Mapping[str, Any]) -> Table:
    return (
        ["gateway", "version", "protocol data from Kafka", "ready", "why not"],
        [
            (g["gateway_id"], g.get("gateway_version") or "-", g.get("protocol_kafka") or "-",
             "yes" if g["ready"] else "no", "; ".join(g["problems"]) or "-")
            for g in release["gateways"]
        ],
    )  # fmt: skip


def feature_rows(release: Mapping[str, Any]) -> Table:
    return (
        ["feature", "change", "API versions it gates", "clients it changes something for"],
        [
            (f["feature"], f"{f['from']} → {f['to']}", ", ".join(f["apis"]) or "-",
             some(f["clients"]))
            for f in release["features"]
        ],
    )  # fmt: skip


__all__ = [
    "READINESS_INTRO",
    "client_rows",
    "feature_rows",
    "gateway_rows",
    "title",
    "verdict_line",
]
