"""The planner's output: ``plan.json``, ``report.md``, ``report.html`` and PNG charts (no Spark).

Works on ``PlanData`` (plain Python collected by ``job.compute_plan``), so the wording,
the ordering of the steps and the charts are testable without a SparkSession.
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.commands import shell_command
from gateway.features.store import DEFAULT_CHROOT

if TYPE_CHECKING:
    from .job import PlanData, PlanInputs

PLAN_VERSION = 1
# Shown in commands when no ZooKeeper address is known (dataset without snapshots).
ZOOKEEPER_PLACEHOLDER = "ZK_HOST:2181"
# Lines per chart before the rest is summed as "other": more is unreadable.
CHART_SERIES = 8
# Rows of the clients table in report.md (plan.json has all of them).
REPORT_CLIENT_ROWS = 40


# -- steps ---------------------------------------------------------------------------------------


def featurectl_command(verb: str, state: Mapping[str, Any], *features: str) -> str:
    """The exact featurectl command line for ``verb`` against the plan's ZooKeeper, as a
    new shell where the plan ran runs it (``.venv/bin/featurectl`` from a checkout)."""
    parts = [shell_command("featurectl"), verb, *_where(state)]
    for feature in features:
        parts += ["--feature", feature]
    if verb in ("downgrade", "disable"):
        parts.append("--allow-downgrade")
    return " ".join(parts)


def _where(state: Mapping[str, Any]) -> list[str]:
    """--zookeeper (and --chroot unless the default): the gateways the plan is about."""
    where = ["--zookeeper", state.get("zookeeper") or ZOOKEEPER_PLACEHOLDER]
    chroot = state.get("chroot")
    if chroot and chroot != DEFAULT_CHROOT:
        where += ["--chroot", chroot]
    return where


def collect_again_command(state: Mapping[str, Any], wanted: str) -> str:
    """Collect 20 rounds from the same gateways, then plan ``wanted`` again with the
    same catalogue: the check after clients were moved."""
    featurectl, where = shell_command("featurectl"), " ".join(_where(state))
    catalogue = f" --catalogue {state['catalogue']}" if state.get("catalogue") else ""
    return (
        f"{featurectl} collect {where} --out metrics-recheck --rounds 20 && "
        f"{featurectl} plan --metrics metrics-recheck {where}{catalogue} --target {wanted}"
    )


def _range(blocker: Mapping[str, Any]) -> str:
    if blocker.get("max_level") is None:
        return "does not list the feature, so supports level 0 only"
    return f"supports {blocker['min_level']}-{blocker['max_level']}"


def _client(c: Mapping[str, Any]) -> str:
    return f"{c['client_software_name']} {c['client_software_version']}"


def build_steps(
    verdicts: Sequence[Mapping[str, Any]],
    blockers: Sequence[Mapping[str, Any]],
    clients: Sequence[Mapping[str, Any]],
    state: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The ordered steps: targets safe now first, each with its prerequisites before it.

    A step is ``{"step", "feature", "kind": manual|check|command, "action", "command",
    "safe_now"}``; ``command`` is None for work outside featurectl (upgrading a gateway,
    moving a client).
    """
    steps: list[dict[str, Any]] = []

    def add(v: Mapping[str, Any], kind: str, action: str, command: str | None, safe: bool) -> None:
        steps.append(
            {
                "step": len(steps) + 1,
                "feature": v["feature"],
                "target_level": v["level"],
                "kind": kind,
                "action": action,
                "command": command,
                "safe_now": safe,
            }
        )

    ordered = sorted(
        (v for v in verdicts if v["kind"] != "noop"), key=lambda v: (not v["safe"], v["feature"])
    )
    for v in ordered:
        feature, level = v["feature"], v["level"]
        wanted = f"{feature}={level}"
        gateway_blockers = [b for b in blockers if b["feature"] == feature and b["level"] == level]
        if v["blocking_gateways"]:
            detail = "; ".join(f"{b['gateway_id']} ({_range(b)})" for b in gateway_blockers)
            add(
                v,
                "manual",
                f"Upgrade these gateways, or the brokers behind them, until each supports "
                f"{wanted}: {detail}.",
                None,
                False,
            )
            add(
                v,
                "check",
                f"Check that {feature}'s SupportedMaxVersion is now >= {level}.",
                featurectl_command("describe", state) + f" --feature {feature}",
                False,
            )
        if v["kind"] == "upgrade" and not v["blocking_gateways"] and not v["safe"]:
            add(
                v,
                "manual",
                "Start (or register) at least one gateway: no live gateway vouches for the level.",
                None,
                False,
            )
        if v["blocking_clients"]:
            users = [
                c
                for c in clients
                if c["feature"] == feature and c["level"] > level and c["requests"] > 0
            ]
            detail = "; ".join(
                f"{_client(c)} ({c['api']} v{c['api_version']}, "
                f"{c['connections_now']:g} connections now, last seen {_iso(c['last_seen'])})"
                for c in users
            )
            add(
                v,
                "manual",
                f"Move these clients off the API versions that need {feature} above "
                f"{level} (upgrade or reconfigure them): {detail}.",
                None,
                False,
            )
            add(
                v,
                "check",
                "Collect again and check that nobody uses them any more.",
                collect_again_command(state, wanted),
                False,
            )
        if v["kind"] == "upgrade":
            add(
                v,
                "command",
                f"Finalize {wanted}.",
                featurectl_command("finalize", state, wanted),
                v["safe"],
            )
        elif v["kind"] == "downgrade":
            add(
                v,
                "command",
                f"Downgrade {feature} to {level}.",
                featurectl_command("downgrade", state, wanted),
                v["safe"],
            )
        else:
            add(
                v,
                "command",
                f"Disable {feature} (withdraw the API versions it gates).",
                featurectl_command("disable", state, feature),
                v["safe"],
            )
    return steps


# -- plan.json ------------------------------------------------------------------------------------


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return (
        datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


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
        return [{**r, **{k: _iso(r.get(k)) for k in keys}} for r in rows]

    dataset = dict(data.dataset)
    dataset["start"] = _iso(dataset["start_ms"])
    dataset["end"] = _iso(dataset["end_ms"])
    return {
        "version": PLAN_VERSION,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "targets_given": dict(inputs.targets),
        "dataset": dataset,
        "state": {**data.state, "time": _iso(data.state.get("time_ms"))},
        "features": data.features,
        "verdicts": data.verdicts,
        "blocking_gateways": data.blockers,
        "clients": with_times(data.clients, "first_seen", "last_seen"),
        # Every API version each client software used (gated or not), busiest first.
        "api_usage": with_times(sorted(data.usage, key=_usage_order), "first_seen", "last_seen"),
        "steps": steps,
        "charts": list(charts),
        "timings_s": data.timings,
    }


# -- report.md ------------------------------------------------------------------------------------


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


def _notes(doc: Mapping[str, Any]) -> list[str]:
    """Warnings about the evidence the plan rests on (shown above the verdicts)."""
    notes = []
    if doc["state"]["source"] == "metrics":
        notes.append(
            "No ZooKeeper and no state snapshot: live gateways and finalized levels come from "
            "the gateways' own gauges at their last scrape. Pass --zookeeper for the live "
            "registry."
        )
    if any(g["scrapes"] < 2 for g in doc["dataset"]["gateway_spans"]):
        notes.append(
            "Some gateways were scraped only once: their request counts are totals since the "
            "gateway started, not use within a window. Collect for longer (featurectl collect "
            "--rounds N) to see who still uses an API version."
        )
    return notes


def _summary(doc: Mapping[str, Any]) -> tuple[str, str]:
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


def _verdict_table(doc: Mapping[str, Any], unsafe: str = "no") -> Table:
    return (
        ["feature", "change", "kind", "safe now", "blocking gateways", "blocking clients"],
        [
            (
                v["feature"],
                f"{v['current_level']} → {v['level']}",
                v["kind"],
                "yes" if v["safe"] else unsafe,
                ", ".join(v["blocking_gateways"]) or "-",
                ", ".join(_client(c) for c in v["blocking_clients"]) or "-",
            )
            for v in doc["verdicts"]
        ],
    )


def _feature_table(doc: Mapping[str, Any]) -> Table:
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


def _client_table(clients: Sequence[Mapping[str, Any]]) -> Table:
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
                _client(c),
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


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        return str("-" if value is None else value).replace("|", "\\|")

    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return out


def render_markdown(doc: Mapping[str, Any]) -> str:
    made, live = _summary(doc)
    lines = ["# kafka-gateway feature plan", "", made, live, ""]
    for note in _notes(doc):
        lines += [f"> {note}", ""]

    lines += ["## Verdicts", ""]
    if doc["verdicts"]:
        lines += _table(*_verdict_table(doc, unsafe="**no**"))
    else:
        lines.append(NOTHING_TO_PLAN)

    lines += ["", "## Steps", ""]
    if not doc["steps"]:
        lines.append("Nothing to do.")
    for step in doc["steps"]:
        marker = "" if step["safe_now"] or step["kind"] != "command" else " (not safe yet)"
        lines.append(f"{step['step']}. **{step['kind']}**{marker}: {step['action']}")
        if step["command"]:
            lines += ["", "   ```sh", f"   {step['command']}", "   ```"]
    lines += ["", "## Features", ""]
    lines += _table(*_feature_table(doc))
    lines += [
        "",
        "## Clients on gated API versions",
        "",
        CLIENTS_INTRO,
        "",
    ]
    clients = doc["clients"]
    if clients:
        lines += _table(*_client_table(clients))
        if len(clients) > REPORT_CLIENT_ROWS:
            lines.append(f"\n({len(clients) - REPORT_CLIENT_ROWS} more rows in plan.json)")
    else:
        lines.append(NO_GATED_CLIENTS)
    if doc["charts"]:
        lines += ["", "## Charts", ""]
        lines += [f"![{Path(c).stem}]({c})" for c in doc["charts"]]
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in doc["timings_s"].items())
    lines += ["", f"<sub>Spark timings: {timings}</sub>", ""]
    return "\n".join(lines)


# -- report.html ---------------------------------------------------------------------------------

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.unsafe { color: #b00020; font-weight: 600; } .safe { color: #1b7f3b; }
.note { background: #fff6d6; border-left: 4px solid #e0b000; padding: .5em 1em; }
pre { background: #f6f6f6; padding: .5em 1em; overflow-x: auto; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
"""


def _html_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        text = "-" if value is None else str(value)
        css = {"no": "unsafe", "yes": "safe"}.get(text)
        return f'<td class="{css}">{escape(text)}</td>' if css else f"<td>{escape(text)}</td>"

    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(doc: Mapping[str, Any], out: Path) -> str:
    """report.html: one file, charts inline (base64 PNG), no script, nothing fetched.

    Meant to be mailed or opened from a CI artefact, so it carries everything; ``out``
    is where the charts named in ``doc`` were written.
    """
    made, live = _summary(doc)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>kafka-gateway feature plan, {escape(doc['generated_at'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>kafka-gateway feature plan</h1>",
        f"<p>{escape(made)}<br>{escape(live)}</p>",
    ]
    parts += [f'<p class="note">{escape(note)}</p>' for note in _notes(doc)]
    parts.append('<h2 id="verdicts">Verdicts</h2>')
    if doc["verdicts"]:
        parts.append(_html_table(*_verdict_table(doc)))
    else:
        parts.append(f"<p>{escape(NOTHING_TO_PLAN)}</p>")
    parts.append('<h2 id="steps">Steps</h2>')
    if doc["steps"]:
        parts.append("<ol>")
        for step in doc["steps"]:
            unsafe = not step["safe_now"] and step["kind"] == "command"
            marker = ' <span class="unsafe">(not safe yet)</span>' if unsafe else ""
            command = f"<pre>{escape(step['command'])}</pre>" if step["command"] else ""
            parts.append(
                f"<li><b>{escape(step['kind'])}</b>{marker}: {escape(step['action'])}{command}</li>"
            )
        parts.append("</ol>")
    else:
        parts.append("<p>Nothing to do.</p>")
    if doc["charts"]:
        parts.append('<h2 id="charts">Charts</h2>')
        for chart in doc["charts"]:
            data = base64.b64encode((out / chart).read_bytes()).decode("ascii")
            name = Path(chart).stem
            parts.append(
                f'<figure id="chart-{escape(name)}"><img alt="{escape(name)}" '
                f'src="data:image/png;base64,{data}"></figure>'
            )
    parts += ['<h2 id="features">Features</h2>', _html_table(*_feature_table(doc))]
    parts += [
        '<h2 id="clients">Clients on gated API versions</h2>',
        f"<p>{escape(CLIENTS_INTRO)}</p>",
    ]
    clients = doc["clients"]
    if clients:
        parts.append(_html_table(*_client_table(clients)))
        if len(clients) > REPORT_CLIENT_ROWS:
            parts.append(f"<p>({len(clients) - REPORT_CLIENT_ROWS} more rows in plan.json)</p>")
    else:
        parts.append(f"<p>{escape(NO_GATED_CLIENTS)}</p>")
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in doc["timings_s"].items())
    parts += [f"<p><small>Spark timings: {escape(timings)}</small></p>", "</body></html>", ""]
    return "\n".join(parts)


# -- charts --------------------------------------------------------------------------------------


def _top_series(
    points: Sequence[tuple[int, str, float]], limit: int = CHART_SERIES
) -> dict[str, dict[int, float]]:
    """label → {time: value}, keeping the ``limit`` largest labels and summing the rest."""
    peak: dict[str, float] = defaultdict(float)
    for _, label, value in points:
        peak[label] = max(peak[label], value)
    keep = set(sorted(peak, key=lambda k: -peak[k])[:limit])
    series: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for bucket, label, value in points:
        series[label if label in keep else "other"][bucket] += value
    return series


def _time_chart(
    series: Mapping[str, Mapping[int, float]], title: str, ylabel: str, path: Path
) -> None:
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for label in sorted(series):
        points = sorted(series[label].items())
        ax.plot(
            [datetime.fromtimestamp(t, UTC) for t, _ in points],
            [v for _, v in points],
            label=label,
            linewidth=1.5,
        )
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _api_version_chart(
    usage: Sequence[Mapping[str, Any]], gated: set[tuple[int, int]], path: Path
) -> bool:
    """Heat map: requests per API (rows) and version (columns); gated cells outlined."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    totals: dict[tuple[str, int], float] = defaultdict(float)
    keys: dict[str, int] = {}
    for u in usage:
        if u["api"] is None or u["api_version"] is None:
            continue
        totals[(u["api"], u["api_version"])] += u["requests"] or 0.0
        keys[u["api"]] = u["api_key"]
    if not totals:
        return False
    per_api: dict[str, float] = defaultdict(float)
    for (api, _), n in totals.items():
        per_api[api] += n
    gated_apis = {api for api, key in keys.items() if any(k == key for k, _ in gated)}
    apis = sorted(per_api, key=lambda a: (a not in gated_apis, -per_api[a]))[:20]
    max_version = max(v for (api, v) in totals if api in apis)
    grid = np.zeros((len(apis), max_version + 1))
    for (api, version), n in totals.items():
        if api in apis:
            grid[apis.index(api), version] = n
    fig, ax = plt.subplots(figsize=(max(6, 0.45 * (max_version + 1) + 3), 0.4 * len(apis) + 1.8))
    image = ax.imshow(np.log10(grid + 1), aspect="auto", cmap="viridis")
    for row, api in enumerate(apis):
        for version in range(max_version + 1):
            if (keys[api], version) in gated and grid[row, version] > 0:
                ax.add_patch(
                    Rectangle((version - 0.5, row - 0.5), 1, 1, fill=False, ec="red", lw=2)
                )
    ax.set_yticks(range(len(apis)), apis, fontsize=8)
    ax.set_xticks(range(max_version + 1), [str(v) for v in range(max_version + 1)], fontsize=8)
    ax.set_xlabel("API version")
    ax.set_title("Requests per API version in the window (log10); red: needs a feature level")
    fig.colorbar(image, ax=ax, label="log10(requests + 1)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def render_charts(data: PlanData, directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers and CI
    directory.mkdir(parents=True, exist_ok=True)
    written = []

    connections = [(r["bucket"], _client(r), r["connections"]) for r in data.connections_series]
    if connections:
        path = directory / "clients_over_time.png"
        _time_chart(
            _top_series(connections),
            "Client connections by client software version (sum over gateways)",
            "connections",
            path,
        )
        written.append(path)

    gated = {(c["api_key"], c["api_version"]) for c in data.clients}
    path = directory / "api_versions.png"
    if _api_version_chart(data.usage, gated, path):
        written.append(path)

    rates = [
        (r["bucket"], f"{r['feature']}={r['level']} · {_client(r)}", r["rate"])
        for r in data.gated_series
    ]
    if rates:
        path = directory / "gated_requests_over_time.png"
        _time_chart(
            _top_series(rates),
            "Requests needing a feature level, by client software",
            "requests/s",
            path,
        )
        written.append(path)
    return written


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


__all__ = [
    "build_steps",
    "featurectl_command",
    "plan_document",
    "render_charts",
    "render_html",
    "render_markdown",
    "write_report",
]
