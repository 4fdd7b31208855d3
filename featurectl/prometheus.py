"""The gateways' series from Prometheus for ``featurectl collect``, instead of scraping.

``--prometheus URL`` pulls them from a Prometheus server's HTTP API
(``pull_prometheus``: one query_range per metric and time window).
``--from-prometheus`` imports Prometheus HTTP-API exports:
``curl '.../api/v1/query_range?query=...&start=...&end=...&step=15s'``
answers ``{"status":"success","data":{"resultType":"matrix","result":[...]}}``. Each
series goes to the file of its gateway, found through ``kafka_gateway_info``'s
``gateway_id`` label on the same ``instance`` (else the ``instance`` itself), with the
sample time written on every line.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from .plan.layout import ScrapeMeta, TextSink, epoch_ms, parse_utc, stamp
from .scrape import INFO_METRIC, Sink, describe_error

# collect's own logger: its messages are one stream to the operator, whichever module.
log = logging.getLogger("featurectl.collect")

# -- query_range exports ---------------------------------------------------------------------


class ExportError(ValueError):
    """A --from-prometheus file is not a Prometheus HTTP-API answer we can read."""


# Labels Prometheus adds from its scrape config: the gateway's own file already says
# which gateway it is, and keeping them would split one series into several.
_TARGET_LABELS = ("instance", "job")


def read_export(path: Path) -> list[dict[str, Any]]:
    """The series of a query_range (matrix) or query (vector) export, values as lists."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ExportError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        raise ExportError(
            f"{path}: expected a Prometheus API answer with status 'success', "
            f"got {str(doc)[:120]!r}"
        )
    data = doc.get("data") or {}
    kind, result = data.get("resultType"), data.get("result")
    if kind not in ("matrix", "vector") or not isinstance(result, list):
        raise ExportError(
            f"{path}: resultType {kind!r} is not supported; export with "
            "/api/v1/query_range (matrix) or /api/v1/query (vector)"
        )
    series = []
    for item in result:
        metric = item.get("metric") or {}
        values = item.get("values") if kind == "matrix" else [item.get("value")]
        if "__name__" not in metric or not isinstance(values, list):
            raise ExportError(
                f"{path}: a series has no __name__ or values; query by metric name or "
                "selector (not an expression that drops the name)"
            )
        series.append({"metric": metric, "values": values})
    return series


def _format_labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return "{" + body + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def gateways_of_instances(series: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``instance`` → ``gateway_id``, from the ``kafka_gateway_info`` series among ``series``."""
    found: dict[str, str] = {}
    for s in series:
        labels = s["metric"]
        if labels.get("__name__") == INFO_METRIC and labels.get("gateway_id"):
            found[labels.get("instance", "")] = labels["gateway_id"]
    return found


def export_to_exposition(
    series: Sequence[Mapping[str, Any]], gateway_of_instance: Mapping[str, str] | None = None
) -> dict[str, list[str]]:
    """Per gateway id, exposition lines ``name{labels} value timestamp_ms`` (grouped by name).

    ``gateway_of_instance``: what earlier answers said (a page of one metric does not
    hold the info series); the info series in ``series`` are used as well.
    """
    gateway_of_instance = {**(gateway_of_instance or {}), **gateways_of_instances(series)}

    by_gateway: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for s in series:
        labels = dict(s["metric"])
        name = labels.pop("__name__")
        instance = labels.get("instance", "")
        gateway_id = (
            labels.get("gateway_id") if name == INFO_METRIC else None
        ) or gateway_of_instance.get(instance, instance or labels.get("job") or "prometheus")
        for key in _TARGET_LABELS:
            labels.pop(key, None)
        prefix = name + _format_labels(labels)
        lines = by_gateway[gateway_id][name]
        for point in s["values"]:
            ts, value = point
            lines.append(f"{prefix} {value} {round(float(ts) * 1000)}")
    return {
        gateway_id: [line for name in sorted(names) for line in names[name]]
        for gateway_id, names in by_gateway.items()
    }


def import_exports(
    out: Path, paths: Sequence[Path], now: datetime | None = None, sink: Sink | None = None
) -> list[Path]:
    """Write each export as its own ``<stamp>-prometheus-<n>`` round of ``sink``."""
    now = now or datetime.now(UTC)
    sink = sink or TextSink(out)
    written: list[Path] = []
    for index, path in enumerate(paths, start=1):
        per_gateway = export_to_exposition(read_export(path))
        written += _write_series(
            sink, f"{stamp(now)}-prometheus-{index}", per_gateway, f"file:{path}"
        )
        log.info("imported the series of %d gateway(s) from %s", len(per_gateway), path)
    return written


def _write_series(
    sink: Sink,
    round_name: str,
    per_gateway: Mapping[str, Sequence[str]],
    url: str,
    now: datetime | None = None,
) -> list[Path]:
    writer = sink.round(round_name)
    now_ms = epoch_ms(now or datetime.now(UTC))
    return [
        writer.write(ScrapeMeta(gateway_id, url, now_ms, "prometheus"), "\n".join(lines) + "\n")
        for gateway_id, lines in sorted(per_gateway.items())
    ]


# -- Prometheus HTTP API (query_range, paged in time) -------------------------------------

# Prometheus refuses a range query of more points per series than this ("exceeded
# maximum resolution of 11,000 points per timeseries").
MAX_POINTS_PER_SERIES = 11_000
# What one answer should carry at most (series x points): ~25 bytes of JSON a point, so
# about 12 MB. The first page of a metric is small and measures its series count; the
# next pages are sized from it.
TARGET_POINTS_PER_ANSWER = 500_000
FIRST_PAGE_POINTS = 60
# The series the text collector gets from a gateway's /metrics.
GATEWAY_SERIES = '{__name__=~"kafka_gateway_.*"}'
PROMETHEUS_TIMEOUT_S = 60.0
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


class PrometheusError(Exception):
    """Prometheus cannot be reached or refused a query; the message says which and why."""


def duration_arg(text: str) -> float:
    """argparse type of a Prometheus duration (``7d``, ``1h30m``, ``15s``) or seconds."""
    try:
        seconds = float(text)
    except ValueError:
        pieces = _DURATION.findall(text)
        if not pieces or "".join(n + u for n, u in pieces) != text:
            raise argparse.ArgumentTypeError(
                f"expected a duration like 7d, 1h30m, 15s (or seconds), got {text!r}"
            ) from None
        seconds = sum(float(n) * _UNIT_S[u] for n, u in pieces)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return seconds


def time_arg(text: str) -> float:
    """argparse type of ``--end``: RFC 3339 (``2025-01-08T00:00:00Z``) or Unix seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_utc(text).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected RFC 3339 (2025-01-08T00:00:00Z) or Unix seconds, got {text!r}"
        ) from None


def prometheus_get(base: str, path: str, params: Mapping[str, str | float], timeout: float) -> Any:
    """``data`` of ``GET <base>/api/v1/<path>``; PrometheusError says what went wrong."""
    url = f"{base.rstrip('/')}/api/v1/{path}?" + urlencode({k: str(v) for k, v in params.items()})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:
        # Prometheus explains a refused query in the JSON body of a 4xx/5xx answer.
        try:
            detail = json.loads(exc.read() or b"{}").get("error") or exc.reason
        except ValueError:
            detail = exc.reason
        raise PrometheusError(f"{base} refused {path}: HTTP {exc.code}: {detail}") from None
    except (OSError, ValueError) as exc:  # refused, timeouts, DNS, not JSON
        raise PrometheusError(
            f"cannot query Prometheus at {base} ({describe_error(exc)}); check --prometheus"
        ) from None
    if not isinstance(body, dict) or body.get("status") != "success":
        raise PrometheusError(f"{base} answered {path} with {str(body)[:200]!r}")
    return body["data"]


def pull_prometheus(
    base: str,
    start: float,
    end: float,
    step: float,
    sink: Sink,
    *,
    timeout: float = PROMETHEUS_TIMEOUT_S,
    now: datetime | None = None,
) -> int:
    """Pull every gateway series of ``start..end`` at ``step`` into ``sink``; samples written.

    One query per metric name and time window: the info series first (they map a
    Prometheus ``instance`` to its ``gateway_id``), then the others, each in windows
    sized so an answer stays near ``TARGET_POINTS_PER_ANSWER`` points and never over
    ``MAX_POINTS_PER_SERIES`` per series.
    """
    now = now or datetime.now(UTC)
    span = {"start": start, "end": end}
    names = sorted(
        prometheus_get(base, "label/__name__/values", {"match[]": GATEWAY_SERIES, **span}, timeout)
    )
    names.sort(key=lambda name: name != INFO_METRIC)
    gateway_of_instance: dict[str, str] = {}
    samples = rounds = 0
    for name in names:
        points = FIRST_PAGE_POINTS
        first = start
        while first <= end:
            # ``points`` evaluation times: first, first + step, ..., last.
            last = min(end, first + (points - 1) * step)
            params = {"query": f'{{__name__="{name}"}}', "start": first, "end": last, "step": step}
            series = prometheus_get(base, "query_range", params, timeout)["result"]
            gateway_of_instance.update(gateways_of_instances(series))
            per_gateway = export_to_exposition(series, gateway_of_instance)
            if per_gateway:
                rounds += 1
                _write_series(sink, f"{stamp(now)}-prometheus-{rounds}", per_gateway, base, now)
                samples += sum(len(lines) for lines in per_gateway.values())
            # Size the next window from this answer's series count.
            fits = TARGET_POINTS_PER_ANSWER // max(1, len(series))
            points = max(1, min(MAX_POINTS_PER_SERIES, fits))
            first = last + step
        log.info("pulled %s", name)
    return samples
