"""The Grafana dashboard in deploy/grafana/: generated, complete, and well-formed queries.

Grafana is not installable here; tests/integration/test_prometheus_scrape.py runs every
query against a real Prometheus scraping real gateways. These checks need neither.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import promql_parser

from tests.harness.grafana import (
    BUILTINS,
    dashboard_targets,
    interpolate,
    panels,
    variable_names,
)
from tests.unit.project.test_deploy import (
    DEPLOY,
    METRICS,
    PROMETHEUS_SYNTHETIC,
    contract_name,
    metric_names,
)

GENERATOR = DEPLOY / "grafana" / "build_dashboard.py"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "kafka-gateway.json"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_dashboard", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def board() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def test_committed_json_is_what_the_generator_builds() -> None:
    module = generator()
    assert DASHBOARD.read_text() == module.render(), (
        f"deploy/grafana/dashboards/kafka-gateway.json is stale: run {module.REGENERATE}"
    )
    check = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stderr


def test_generator_check_reports_a_stale_file(tmp_path: Path) -> None:
    module = generator()
    module.OUTPUT = tmp_path / "kafka-gateway.json"
    module.OUTPUT.write_text("{}\n")
    assert module.main(["--check"]) == 1
    assert module.main([]) == 0 and module.main(["--check"]) == 0


def test_the_panels_operators_asked_for_are_there() -> None:
    titles = [p["title"] for p in panels(board())]
    for wanted in (
        "Requests by API and version",
        "Rejected requests by reason",
        "Errors by kind",
        "Request latency quantiles",
        "Connections by client software (KIP-511)",
        "Broker software per gateway (KIP-885)",
        "Finalized feature levels per gateway",
        "Finalized feature epoch per gateway",
        "Feature epoch divergence",
        "ZooKeeper staleness",
        "Worker restarts",
        "Event-loop lag p99",
        "Requests the next Kafka release refuses",
    ):
        assert wanted in titles
    assert len(titles) == len(set(titles))


def test_divergence_is_highlighted_red_above_zero() -> None:
    (panel,) = [p for p in panels(board()) if p["title"] == "Feature epoch divergence"]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [(s["value"], s["color"]) for s in steps] == [(None, "green"), (1, "red")]
    assert panel["options"]["colorMode"] == "background"


def test_every_query_uses_defined_variables_and_contract_metrics_only() -> None:
    b = board()
    defined = {v["name"] for v in b["templating"]["list"]}
    # Not (yet) in the contract: issue 12's worker restarts (its panel may read "No data")
    # and Prometheus' own ALERTS series (the annotation).
    allowed = METRICS | PROMETHEUS_SYNTHETIC | {generator().WORKER_RESTARTS, "ALERTS"}
    expressions = [(p["title"], t) for p, t in dashboard_targets(DASHBOARD)]
    expressions += [("annotation " + a["name"], a) for a in b["annotations"]["list"]]
    for where, target in expressions:
        expr = target["expr"]
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
        unknown = variable_names(expr) - defined - BUILTINS
        assert not unknown, f"{where}: undefined variables {unknown}"
        concrete = interpolate(
            expr,
            {name: ["a.b:1", "c"] for name in defined},
            step_s=15,
            scrape_interval_s=15,
            range_s=3600,
        )
        used = {contract_name(n) for n in metric_names(concrete)}
        assert used and used <= allowed, f"{where}: {used - allowed}"


def test_every_panel_has_unique_ref_ids_and_sits_on_the_grid() -> None:
    occupied: set[tuple[int, int]] = set()
    ids = []
    for panel in board()["panels"]:
        ids.append(panel["id"])
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)) and all(refs), panel["title"]
    assert len(ids) == len(set(ids))


def test_interpolation_escapes_values_as_grafana_does() -> None:
    expr = 'up{instance=~"$instance"}[$__rate_interval]'
    got = interpolate(
        expr, {"instance": ["127.0.0.1:9404", "b"]}, step_s=1, scrape_interval_s=1, range_s=9
    )
    assert got == 'up{instance=~"(127\\\\.0\\\\.0\\\\.1:9404|b)"}[4s]'
    promql_parser.parse(got)
    # Unquoted from PromQL, the regex matches the value itself and not a look-alike.
    regex = got.split('"')[1].replace("\\\\", "\\")
    assert re.fullmatch(regex, "127.0.0.1:9404") and re.fullmatch(regex, "b")
    assert not re.fullmatch(regex, "127x0x0x1:9404")
