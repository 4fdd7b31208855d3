"""report.md: the plan for people, in Markdown, with the charts beside it as PNG files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from featurectl.plan.sections import (
    CLIENTS_INTRO,
    NO_GATED_CLIENTS,
    NOTHING_TO_PLAN,
    REPORT_CLIENT_ROWS,
    client_table,
    feature_table,
    notes,
    summary,
    verdict_table,
)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    def cell(value: Any) -> str:
        return str("-" if value is None else value).replace("|", "\\|")

    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return out


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

    lines += ["", "## Steps", ""]
    if not doc["steps"]:
        lines.append("Nothing to do.")
    for step in doc["steps"]:
        marker = "" if step["safe_now"] or step["kind"] != "command" else " (not safe yet)"
        lines.append(f"{step['step']}. **{step['kind']}**{marker}: {step['action']}")
        if step["command"]:
            lines += ["", "   ```sh", f"   {step['command']}", "   ```"]
    lines += ["", "## Features", ""]
    lines += _table(*feature_table(doc))
    lines += [
        "",
        "## Clients on gated API versions",
        "",
        CLIENTS_INTRO,
        "",
    ]
    clients = doc["clients"]
    if clients:
        lines += _table(*client_table(clients))
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
