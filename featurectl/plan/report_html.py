"""report.html: the same plan as one self-contained file, charts inside (base64 PNG)."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from featurectl.plan.release_sections import (
    READINESS_INTRO,
    client_rows,
    feature_rows,
    gateway_rows,
    verdict_line,
)
from featurectl.plan.release_sections import title as release_title
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

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.6em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
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


def _more(rows: Sequence[Any]) -> list[str]:
    if len(rows) <= REPORT_CLIENT_ROWS:
        return []
    return [f"<p>({len(rows) - REPORT_CLIENT_ROWS} more rows in plan.json)</p>"]


def _release(release: Mapping[str, Any]) -> list[str]:
    """The "Kafka X readiness" section (``release_sections``)."""
    css = "safe" if release["safe"] else "unsafe"
    name = escape(release["release"])
    parts = [
        f'<h2 id="release-{name}">{escape(release_title(release))}</h2>',
        f'<p class="{css}">{escape(verdict_line(release))}</p>',
        f"<p>{escape(READINESS_INTRO.format(release=release['release']))}</p>",
    ]
    if release["clients"]:
        parts += [_html_table(*client_rows(release)), *_more(release["clients"])]
    parts += ["<p>Gateways:</p>", _html_table(*gateway_rows(release))]
    if release["features"]:
        parts += ["<p>Levels the release finalizes:</p>", _html_table(*feature_rows(release))]
    parts.append("<ol>")
    for step in release["steps"]:
        command = f"<pre>{escape(step['command'])}</pre>" if step["command"] else ""
        parts.append(f"<li><b>{escape(step['kind'])}</b>: {escape(step['action'])}{command}</li>")
    return [*parts, "</ol>"]


def render_html(doc: Mapping[str, Any], out: Path) -> str:
    """report.html: one file, charts inline (base64 PNG), no script, nothing fetched.

    Meant to be mailed or opened from a CI artefact, so it carries everything; ``out``
    is where the charts named in ``doc`` were written.
    """
    made, live = summary(doc)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>kafka-gateway feature plan, {escape(doc['generated_at'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>kafka-gateway feature plan</h1>",
        f"<p>{escape(made)}<br>{escape(live)}</p>",
    ]
    parts += [f'<p class="note">{escape(note)}</p>' for note in notes(doc)]
    parts.append('<h2 id="verdicts">Verdicts</h2>')
    if doc["verdicts"]:
        parts.append(_html_table(*verdict_table(doc)))
    else:
        parts.append(f"<p>{escape(NOTHING_TO_PLAN)}</p>")
    for anchor, title, intro, rows, table, empty in (
        ("broken-now", "Broken now", BROKEN_INTRO, doc.get("broken_now", []), broken_table,
         NOTHING_BROKEN),
        ("wanting", "Clients that want a feature they cannot get", WANTING_INTRO,
         doc.get("wanting", []), wanting_table, NOBODY_WANTING),
    ):  # fmt: skip
        parts += [f'<h2 id="{anchor}">{escape(title)}</h2>', f"<p>{escape(intro)}</p>"]
        parts.append(_html_table(*table(rows)) if rows else f"<p>{escape(empty)}</p>")
        parts += _more(rows)
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
    for release in doc.get("releases", []):
        parts += _release(release)
    if doc["charts"]:
        parts.append('<h2 id="charts">Charts</h2>')
        for chart in doc["charts"]:
            data = base64.b64encode((out / chart).read_bytes()).decode("ascii")
            name = Path(chart).stem
            parts.append(
                f'<figure id="chart-{escape(name)}"><img alt="{escape(name)}" '
                f'src="data:image/png;base64,{data}"></figure>'
            )
    losses = losses_table(doc)
    if losses[1]:
        parts += [
            '<h2 id="losses">Who loses what, per target</h2>',
            f"<p>{escape(LOSSES_INTRO)}</p>",
            _html_table(*losses),
        ]
    parts += ['<h2 id="features">Features</h2>', _html_table(*feature_table(doc))]
    withheld = withheld_notes(doc)
    if withheld:
        parts.append("<ul>" + "".join(f"<li>{escape(line)}</li>" for line in withheld) + "</ul>")
    by_client = doc.get("api_versions_by_client", [])
    if by_client:
        parts += [
            '<h2 id="api-versions-by-client">API versions by client</h2>',
            f"<p>{escape(VERSIONS_INTRO)}</p>",
            _html_table(*versions_table(doc)),
            *_more(by_client),
        ]
    parts += [
        '<h2 id="clients">Clients on gated API versions</h2>',
        f"<p>{escape(CLIENTS_INTRO)}</p>",
    ]
    clients = doc["clients"]
    if clients:
        parts.append(_html_table(*client_table(clients, doc["dataset"].get("start"))))
        if len(clients) > REPORT_CLIENT_ROWS:
            parts.append(f"<p>({len(clients) - REPORT_CLIENT_ROWS} more rows in plan.json)</p>")
    else:
        parts.append(f"<p>{escape(NO_GATED_CLIENTS)}</p>")
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in doc["timings_s"].items())
    parts += [f"<p><small>Spark timings: {escape(timings)}</small></p>", "</body></html>", ""]
    return "\n".join(parts)


__all__ = ["render_html"]
