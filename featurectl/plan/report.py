"""The planner's output files: ``plan.json``, ``report.md``, ``report.html`` and the PNG
charts (no Spark).

Works on ``PlanData`` (plain Python collected by ``compute.compute_plan``), so the
wording, the ordering of the steps and the charts are testable without a SparkSession.
plan.json is the document both reports are rendered from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from featurectl.plan.charts import render_charts
from featurectl.plan.layout import epoch_ms, iso_time
from featurectl.plan.model import PlanData, PlanInputs
from featurectl.plan.report_html import render_html
from featurectl.plan.report_md import render_markdown
from featurectl.plan.steps import build_steps

PLAN_VERSION = 1


def _usage_order(u: Mapping[str, Any]) -> tuple[Any, ...]:
    """Busiest first, then a total order: the same data gives the same plan.json on any
    master (rows come back from Spark in whatever order its partitions finished)."""
    return (
        -(u["requests"] or 0.0),
        u["api_key"] if u["api_key"] is not None else -1,
        u["api_version"] if u["api_version"] is not None else -1,
        u["client_software_name"] or "",
        u["client_software_version"] or "",
    )


def plan_document(
    inputs: PlanInputs, data: PlanData, steps: list[dict[str, Any]], charts: Sequence[str]
) -> dict[str, Any]:
    def with_times(rows: Sequence[Mapping[str, Any]], *keys: str) -> list[dict[str, Any]]:
        return [{**r, **{k: iso_time(r.get(k)) for k in keys}} for r in rows]

    dataset = dict(data.dataset)
    dataset["start"] = iso_time(dataset["start_ms"])
    dataset["end"] = iso_time(dataset["end_ms"])
    return {
        "version": PLAN_VERSION,
        "generated_at": iso_time(epoch_ms(datetime.now(UTC))),
        "targets_given": dict(inputs.targets),
        "dataset": dataset,
        "state": {**data.state, "time": iso_time(data.state.get("time_ms"))},
        "features": data.features,
        "verdicts": [
            {**v, "losses": with_times(v["losses"], "last_seen")} if "losses" in v else v
            for v in data.verdicts
        ],
        "blocking_gateways": data.blockers,
        "clients": with_times(data.clients, "first_seen", "last_seen"),
        # Every API version each client software used (gated or not), busiest first.
        "api_usage": with_times(sorted(data.usage, key=_usage_order), "first_seen", "last_seen"),
        # Refused requests by reason, API version and client; those no level fixes
        # (broken now) and those a level would fix (wanting), each with its remedy.
        "refusals": with_times(data.refusals, "first_seen", "last_seen"),
        "broken_now": with_times(data.broken_now, "first_seen", "last_seen"),
        "wanting": with_times(data.wanting, "first_seen", "last_seen"),
        # ApiVersions answered the KIP-511 way and retried lower: not broken.
        "negotiated": with_times(data.negotiated, "first_seen", "last_seen"),
        # Per client software: every API version it used, client ids and addresses.
        "api_versions_by_client": with_times(data.versions_by_client, "first_seen", "last_seen"),
        "identities": data.identities,
        # Per --release: "release X readiness" (featurectl.plan.readiness).
        "releases": data.releases,
        "steps": steps,
        "charts": list(charts),
        "timings_s": data.timings,
    }


def write_report(inputs: PlanInputs, data: PlanData) -> dict[str, Any]:
    out = Path(inputs.out)
    out.mkdir(parents=True, exist_ok=True)
    charts = [p.relative_to(out).as_posix() for p in render_charts(data, out / "charts")]
    steps = build_steps(data.verdicts, data.blockers, data.clients, data.state)
    doc = plan_document(inputs, data, steps, charts)
    plan_path = out / "plan.json"
    plan_path.write_text(json.dumps(doc, indent=2) + "\n")
    report_path = out / "report.md"
    report_path.write_text(render_markdown(doc))
    html_path = out / "report.html"
    html_path.write_text(render_html(doc, out))
    return {"plan": plan_path, "report": report_path, "html": html_path, "charts": charts}


__all__ = ["PLAN_VERSION", "plan_document", "write_report"]
