"""report.md: the plan for people, in Markdown, with the charts beside it as PNG files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from featurectl.plan.release_sections import (
    READINESS_INTRO,
    client_rows,
    feature_rows,
    gateway_rows,
    title,
    verdict_line,
)
from featurectl.plan.sections import (
    BROKEN_INTRO,
    CLIENTS_INTRO,
    LOSSES_INTRO,
    NO_GATED_CLIENTS,
    NOBODY_WANTING,
    NOTHING_BROKEN,
    NOTHING_TO_PLAN,
    REPORT_CLIENT_ROWS,
    VERSIONS_INTRO,
    WANTING_INTRO,
    broken_table,
    client_table,
    feature_table,
    losses_table,
    notes,
    summary,
    verdict_table,
    versions_table,
    wanting_table,
    withheld_notes,
)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        return str("-" if value is None else value).replace("|", "\\|")

    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return out


def _more(lines: list[str], rows: Sequence[Any]) -> None:
    if len(rows) > REPORT_CLIENT_ROWS:
        lines.append(f"\n({len(rows) - REPORT_CLIENT_ROWS} more rows in plan.json)")


def _release(release: Mapping[str, Any]) -> list[str]:
    """The "Kafka X readiness" section (``release_sections``)."""
    lines = ["", f"## {title(release)}", "", f"**{verdict_line(release)}**", ""]
    lines += [READINESS_INTRO.format(release=release["release"]), ""]
    if release["clients"]:
        lines += _table(*client_rows(release))
        _more(lines, release["clients"])
    else:
        lines.append("No client traffic in the window.")
    lines += ["", "Gateways:", "", *_table(*gateway_rows(release))]
    if release["features"]:
        lines += ["", "Levels the release finalizes:", "", *_table(*feature_rows(release))]
    lines += ["", "Steps, in order:", ""]
    for step in release["steps"]:
        lines.append(f"{step['step']}. **{step['kind']}**: {step['action']}")
        if step["command"]:
            lines += ["", "   ```sh", f"   {step['command']}", "   ```"]
    return lines


def render_markdown(doc: Mapping[str, Any]) -> str:
    made, live = summary(doc)
    lines = ["# kafka-gateway feature plan", "", made, live, ""]
    for note in notes(doc):
        lines += [f"> {note}", ""]

    lines += ["## Verdicts", ""]
    if doc["verdicts"]:
        lines += _table(*verdict_table(doc, unsafe="**no**"))
    else:
        lines.append(NOTHING_TO_PLAN)

    lines += ["", "## Broken now", "", BROKEN_INTRO, ""]
    broken = doc.get("broken_now", [])
    lines += _table(*broken_table(broken)) if broken else [NOTHING_BROKEN]
    _more(lines, broken)
    lines += ["", "## Clients that want a feature they cannot get", "", WANTING_INTRO, ""]
    wanting = doc.get("wanting", [])
    lines += _table(*wanting_table(wanting)) if wanting else [NOBODY_WANTING]
    _more(lines, wanting)

    lines += ["", "## Steps", ""]
    if not doc["steps"]:
        lines.append("Nothing to do.")
    for step in doc["steps"]:
        marker = "" if step["safe_now"] or step["kind"] != "command" else " (not safe yet)"
        lines.append(f"{step['step']}. **{step['kind']}**{marker}: {step['action']}")
        if step["command"]:
            lines += ["", "   ```sh", f"   {step['command']}", "   ```"]
    for release in doc.get("releases", []):
        lines += _release(release)
    losses = losses_table(doc)
    if losses[1]:
        lines += ["", "## Who loses what, per target", "", LOSSES_INTRO, ""]
        lines += _table(*losses)
    lines += ["", "## Features", ""]
    lines += _table(*feature_table(doc))
    withheld = withheld_notes(doc)
    if withheld:
        lines += ["", *(f"- {line}" for line in withheld)]
    by_client = doc.get("api_versions_by_client", [])
    if by_client:
        lines += ["", "## API versions by client", "", VERSIONS_INTRO, ""]
        lines += _table(*versions_table(doc))
        _more(lines, by_client)
    lines += [
        "",
        "## Clients on gated API versions",
        "",
        CLIENTS_INTRO,
        "",
    ]
    clients = doc["clients"]
    if clients:
        lines += _table(*client_table(clients, doc["dataset"].get("start")))
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


__all__ = ["render_markdown"]
