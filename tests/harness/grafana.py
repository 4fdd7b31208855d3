"""What Grafana does to a dashboard's Prometheus queries before it sends them.

Grafana itself cannot be installed here, so the dashboard's queries are tested by doing
Grafana's part by hand: resolve the query variables (``label_values(...)``) against the
Prometheus, then interpolate variables and the built-in intervals into each expression
the way Grafana's Prometheus data source does, and send the result to Prometheus.

References (Grafana 12): ``$__rate_interval`` is max(``$__interval`` + scrape interval,
4 x scrape interval); a multi-value or include-all variable becomes ``(v1|v2)`` with
each value's regex metacharacters escaped (``prometheusSpecialRegexEscape``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .prometheus import PrometheusProcess

__all__ = [
    "BUILTINS",
    "dashboard_targets",
    "interpolate",
    "panels",
    "resolve_variables",
    "variable_names",
]

# Grafana's built-in variables the dashboard may use in expressions.
BUILTINS = frozenset({"__rate_interval", "__interval", "__range"})
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
_LABEL_VALUES = re.compile(r"label_values\((?:(?P<match>.+),\s*)?(?P<label>\w+)\)")
_REGEX_SPECIAL = re.compile(r"[$^*{}\[\]'+?.()|]")


def panels(board: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that queries (rows, and panels nested in collapsed rows, flattened)."""
    for panel in board["panels"]:
        if panel["type"] == "row":
            yield from (p for p in panel.get("panels", []) if p.get("targets"))
        elif panel.get("targets"):
            yield panel


def dashboard_targets(path: Path) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(panel, target) for every query of the dashboard JSON at ``path``."""
    board = json.loads(path.read_text())
    for panel in panels(board):
        for target in panel["targets"]:
            yield panel, target


def variable_names(expr: str) -> set[str]:
    """The ``$name`` / ``${name}`` variables an expression uses."""
    return {m[1] or m[2] for m in _VARIABLE.finditer(expr)}


def _regex_escape(value: str) -> str:
    # Backslashes doubled for the PromQL string literal the value lands in.
    return _REGEX_SPECIAL.sub(lambda m: "\\\\" + m[0], value.replace("\\", "\\\\\\\\"))


def interpolate(
    expr: str,
    variables: Mapping[str, Sequence[str]],
    *,
    step_s: float,
    scrape_interval_s: float,
    range_s: float,
) -> str:
    """``expr`` as Grafana sends it, with multi-value ``variables`` selected as given."""
    rate_interval = max(step_s + scrape_interval_s, 4 * scrape_interval_s)
    builtins = {
        "__rate_interval": f"{rate_interval:g}s",
        "__interval": f"{step_s:g}s",
        "__range": f"{round(range_s)}s",
    }

    def value(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        if name in builtins:
            return builtins[name]
        return "(" + "|".join(_regex_escape(v) for v in variables[name]) + ")"

    return _VARIABLE.sub(value, expr)


def resolve_variables(
    board: Mapping[str, Any], prometheus: PrometheusProcess
) -> dict[str, list[str]]:
    """Each query variable's options, in order, with every option selected ("All").

    A variable's query may use variables defined before it, as in Grafana.
    """
    resolved: dict[str, list[str]] = {}
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = _LABEL_VALUES.fullmatch(variable["query"])
        if match is None:
            raise ValueError(f"{variable['name']}: only label_values() queries are supported")
        selector = match["match"]
        if selector is not None:
            selector = interpolate(
                selector, resolved, step_s=1, scrape_interval_s=prometheus.interval_s, range_s=0
            )
        resolved[variable["name"]] = sorted(prometheus.label_values(match["label"], selector))
    return resolved
