"""A real Prometheus server (Debian's ``prometheus`` package) scraping parts of a test.

Targets come from a ``file_sd_configs`` file that the test may rewrite at any time
(``set_targets``): Prometheus re-reads it on change, so gateways started after the
server are scraped without a restart. Scrapes and rule evaluations run every second,
so a series or an alert shows within a few seconds of its cause. Storage lives in the
test's directory and goes with it.

Only the HTTP API that tests and ``featurectl collect --prometheus`` need is wrapped:
instant queries, range queries, targets and alerts (``/api/v1/...``).
"""

from __future__ import annotations

import json
import re
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from .ports import LOOPBACK, free_port
from .procs import HarnessError, ManagedProcess

__all__ = ["PrometheusProcess", "prometheus_binary"]


def prometheus_binary() -> str | None:
    """Path of the ``prometheus`` server binary, or None when it is not installed."""
    return shutil.which("prometheus")


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


def _unix_time(stamp: str) -> float:
    """Prometheus' RFC 3339 times (nanosecond fractions, which datetime cannot read)."""
    match = _RFC3339.fullmatch(stamp)
    if match is None:
        raise HarnessError(f"prometheus: unreadable time {stamp!r}")
    zone = "+00:00" if match[3] == "Z" else match[3]
    whole = datetime.fromisoformat(match[1] + zone).timestamp()
    return whole + float(f"0.{match[2] or 0}")


class PrometheusProcess(ManagedProcess):
    """``prometheus`` bound to loopback, scraping ``targets`` every second.

    ``rule_files`` are loaded as they are (alerting and recording rules), evaluated every
    second. ``job`` is the scrape job's name, which becomes the ``job`` label.
    ``target_labels`` go on every target, as a deployment's scrape config sets them (the
    alert rules group by ``kafka_cluster``).
    """

    start_timeout = 60.0

    def __init__(
        self,
        workdir: Path,
        targets: Iterable[str] = (),
        rule_files: Sequence[Path] = (),
        target_labels: Mapping[str, str] | None = None,
        job: str = "kafka-gateway",
        interval_s: float = 1.0,
        name: str = "prometheus",
    ) -> None:
        workdir = Path(workdir)
        super().__init__(name, workdir / f"{name}.log")
        binary = prometheus_binary()
        if binary is None:
            raise HarnessError("prometheus is not on PATH (Debian package: prometheus)")
        self._binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.job = job
        self.interval_s = interval_s
        self.rule_files = [Path(p) for p in rule_files]
        self.config_path = workdir / f"{name}.yml"
        self.targets_path = workdir / f"{name}-targets.json"
        self.data_dir = workdir / f"{name}-data"
        self._targets = list(targets)
        self._target_labels = dict(target_labels or {})

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def _before_start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_targets()
        interval = f"{self.interval_s:g}s"
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {
                    "job_name": self.job,
                    "scrape_timeout": interval,
                    "file_sd_configs": [
                        {"files": [str(self.targets_path)], "refresh_interval": interval}
                    ],
                }
            ],
        }
        if self.rule_files:
            config["rule_files"] = [str(p) for p in self.rule_files]
        # JSON is YAML: no YAML writer needed.
        self.config_path.write_text(json.dumps(config, indent=2))

    def command(self) -> list[str]:
        return [
            self._binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--web.listen-address={LOOPBACK}:{self.port}",
            "--web.enable-lifecycle",
            "--log.level=info",
        ]

    def _probe_ready(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)

    # -- targets ----------------------------------------------------------------------
    def set_targets(self, targets: Iterable[str]) -> None:
        """Scrape these ``host:port`` targets from now on (picked up within a second)."""
        self._targets = list(targets)
        self._write_targets()

    def _write_targets(self) -> None:
        # Written beside and renamed: Prometheus must never read a half-written file.
        tmp = self.targets_path.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": self._targets, "labels": self._target_labels}]))
        tmp.replace(self.targets_path)

    # -- HTTP API -----------------------------------------------------------------------
    def api(self, path: str, **params: str | float) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data``; raise HarnessError on an error."""
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
            raise HarnessError(f"prometheus {path} {params}: {body.get('error', exc)}") from exc
        if body.get("status") != "success":
            raise HarnessError(f"prometheus {path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; the result vector (``[{"metric": {...}, "value": [t, "v"]}]``)."""
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        data = self.api("query_range", query=expr, start=start, end=end, step=step)
        result: list[dict[str, Any]] = data["result"]
        return result

    def active_targets(self) -> list[dict[str, Any]]:
        targets: list[dict[str, Any]] = self.api("targets")["activeTargets"]
        return targets

    def metadata(self) -> dict[str, list[dict[str, Any]]]:
        """Metric family name -> ``[{"type", "help", "unit"}]`` as scraped (TYPE/HELP lines)."""
        metadata: dict[str, list[dict[str, Any]]] = self.api("metadata")
        return metadata

    def series(self, match: str) -> list[dict[str, str]]:
        """The label sets of every stored series that ``match`` selects."""
        series: list[dict[str, str]] = self.api("series", **{"match[]": match})
        return series

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        """Values of ``label`` (over the series ``match`` selects), as Grafana's
        ``label_values()`` variable query asks for them."""
        params = {"match[]": match} if match else {}
        values: list[str] = self.api(f"label/{label}/values", **params)
        return values

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule with its state, health and last evaluation time."""
        groups = self.api("rules")["groups"]
        return [rule for group in groups for rule in group["rules"]]

    def rules_evaluated_since(self, since: float, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Wait until every loaded rule was evaluated after Unix time ``since``; return them.

        A rule's state read before that may predate the series a test just caused.
        """
        deadline = time.monotonic() + timeout
        while True:
            rules = self.rules()
            if rules and all(_unix_time(r["lastEvaluation"]) > since for r in rules):
                return rules
            if time.monotonic() >= deadline:
                stamps = {r["name"]: r["lastEvaluation"] for r in rules}
                raise HarnessError(f"prometheus: rules not evaluated since {since}: {stamps}")
            time.sleep(self.interval_s / 2)

    def firing_alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return [a for a in alerts if a.get("state") == "firing"]

    def wait_for(self, expr: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Poll an instant query until it returns a non-empty result; return it."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() >= deadline:
                raise HarnessError(f"prometheus: {expr!r} returned nothing for {timeout:g} s")
            time.sleep(self.interval_s / 2)

    def wait_for_alert(self, name: str, timeout: float = 60.0, **labels: str) -> dict[str, Any]:
        """Poll until alert ``name`` fires with (at least) ``labels``; return that alert."""
        deadline = time.monotonic() + timeout
        while True:
            for alert in self.firing_alerts():
                if alert["labels"].get("alertname") == name and (
                    labels.items() <= alert["labels"].items()
                ):
                    return alert
            if time.monotonic() >= deadline:
                states = [(a["labels"], a.get("state")) for a in self.api("alerts")["alerts"]]
                raise HarnessError(
                    f"prometheus: alert {name} {labels} not firing after {timeout:g} s: {states}"
                )
            time.sleep(self.interval_s / 2)

    def wait_targets_up(self, timeout: float = 30.0) -> None:
        """Wait until every configured target was scraped successfully at least once."""
        deadline = time.monotonic() + timeout
        while True:
            targets = self.active_targets()
            up = {t["labels"]["instance"] for t in targets if t.get("health") == "up"}
            if set(self._targets) <= up:
                return
            if time.monotonic() >= deadline:
                states = {t["labels"]["instance"]: t.get("lastError") for t in targets}
                raise HarnessError(f"prometheus targets not up after {timeout:g} s: {states}")
            time.sleep(self.interval_s / 2)
