"""``featurectl collect``: scrape every live gateway's /metrics into a dataset for ``plan``.

Each round finds the live gateways in ZooKeeper (their registrations carry
``metrics_url``), adds the ``--gateway`` URLs, scrapes them concurrently and buffers the
samples for the Parquet dataset (``featurectl.plan.columnar``; ``--format text``: one
``.prom`` file plus sidecar per gateway), and writes a snapshot of the finalized levels
and registrations, so ``featurectl plan`` can run later without ZooKeeper. The layout is
described in ``featurectl.plan.layout``.

``--prometheus URL`` pulls the same series from a Prometheus server's HTTP API
(``pull_prometheus``: one query_range per metric and time window).
``--from-prometheus`` imports Prometheus HTTP-API exports instead of (or besides) scraping:
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
import os
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from kazoo.exceptions import ConnectionLoss, KazooException
from kazoo.handlers.threading import KazooTimeoutError

from featurectl.plan.columnar import SampleSink
from featurectl.plan.layout import (
    ScrapeMeta,
    StateSnapshot,
    TextSink,
    epoch_ms,
    parse_utc,
    stamp,
)
from featurectl.plan.layout import write_state as write_state_file
from gateway.commands import add_command
from gateway.features.store import DEFAULT_CHROOT, ZOOKEEPER_ENV

log = logging.getLogger("featurectl.collect")

EXIT_OK = 0
EXIT_NOTHING = 1
EXIT_USAGE = 2

DEFAULT_INTERVAL_S = 15.0
# Parquet: scrapes are buffered and written every this many seconds (and at exit); a file
# per 15 s round would be thousands of tiny files a day, each costing the planner an open.
DEFAULT_FLUSH_S = 300.0
# Per-request timeout: a hung gateway must not stall a round past its interval.
SCRAPE_TIMEOUT_S = 5.0
# Scrapes run concurrently so one slow gateway costs one timeout, not one per gateway.
MAX_PARALLEL_SCRAPES = 16
# Prometheus' own Accept header for the text format; prometheus_client answers with it.
ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
INFO_METRIC = "kafka_gateway_info"

EPILOG = """\
examples:
  # every gateway registered in ZooKeeper, every 15 s until Ctrl-C
  featurectl collect --zookeeper zk-0:2181 --out metrics/

  # one round (cron), plus a gateway that does not register itself
  featurectl collect --zookeeper zk-0:2181 --gateway http://gw-9:9404/metrics --once --out metrics/

  # no scraping: a week of the gateways' series from Prometheus, one sample a minute
  featurectl collect --prometheus http://prometheus:9090 --range 7d --step 1m --out metrics/

  # or import Prometheus exports (query_range JSON)
  curl -sG http://prometheus:9090/api/v1/query_range \\
       --data-urlencode 'query={__name__=~"kafka_gateway_.*"}' \\
       --data-urlencode start=2025-01-01T00:00:00Z --data-urlencode end=2025-01-02T00:00:00Z \\
       --data-urlencode step=60s > gw.json
  featurectl collect --from-prometheus gw.json --out metrics/

  # then plan offline
  featurectl plan --metrics metrics/ --target group.version=1

format: Parquet under DIR/samples/ by default (buffered, written every --flush seconds
        and at exit); --format text writes the old one-file-per-scrape layout, which
        plan still reads ('featurectl convert' turns it into Parquet).

exit codes: 0 collected, 1 nothing collected (every gateway unreachable, no input, no
            gateway series in the Prometheus range), 2 usage error, ZooKeeper or
            Prometheus unreachable, or a query Prometheus refused
"""


# Where scrapes go: Parquet (columnar.SampleSink) or the text layout (layout.TextSink).
Sink = SampleSink | TextSink


@dataclass(frozen=True, slots=True)
class Target:
    """A /metrics endpoint to scrape; ``gateway_id`` is None until the scrape says it."""

    url: str
    gateway_id: str | None = None


@dataclass(slots=True)
class RoundResult:
    round_name: str
    written: list[Path] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


# -- scraping -----------------------------------------------------------------------------


def scrape(url: str, timeout: float = SCRAPE_TIMEOUT_S) -> str:
    """GET one /metrics endpoint as text (raises OSError/ValueError on failure)."""
    request = urllib.request.Request(url, headers={"Accept": ACCEPT})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        charset = response.headers.get_content_charset() or "utf-8"
        return response.read().decode(charset)


def gateway_id_from_text(text: str) -> str | None:
    """The ``gateway_id`` label of ``kafka_gateway_info`` in a scrape, if present."""
    from prometheus_client.parser import text_string_to_metric_families

    # Only the info lines are parsed: the rest of a scrape can be thousands of lines.
    info = "\n".join(line for line in text.splitlines() if line.startswith(INFO_METRIC))
    try:
        for family in text_string_to_metric_families(info + "\n"):
            for sample in family.samples:
                if sample.labels.get("gateway_id"):
                    return sample.labels["gateway_id"]
    except ValueError:
        return None
    return None


def fallback_id(url: str) -> str:
    """``host:port`` of a URL: the id of a gateway whose scrape does not name itself."""
    parts = urlsplit(url)
    return parts.netloc or url


def targets_from_registry(registrations: Iterable[Any]) -> tuple[list[Target], list[str]]:
    """(targets, ids of gateways without a metrics_url) from ZooKeeper registrations."""
    targets, without = [], []
    for reg in registrations:
        if reg.metrics_url:
            targets.append(Target(reg.metrics_url, reg.gateway_id))
        else:
            without.append(reg.gateway_id)
    return targets, without


def merge_targets(registered: Sequence[Target], explicit: Sequence[str]) -> list[Target]:
    """Registered targets plus explicit URLs; a URL given both ways is scraped once."""
    out = list(registered)
    known = {t.url.rstrip("/") for t in out}
    for url in explicit:
        if url.rstrip("/") not in known:
            known.add(url.rstrip("/"))
            out.append(Target(url))
    return out


def collect_round(
    out: Path,
    targets: Sequence[Target],
    *,
    now: datetime | None = None,
    timeout: float = SCRAPE_TIMEOUT_S,
    sink: Sink | None = None,
) -> RoundResult:
    """Scrape ``targets`` concurrently into ``sink`` (default: text files under ``out``).

    Failures are logged and listed in the result.
    """
    started = now or datetime.now(UTC)
    result = RoundResult(stamp(started))
    if not targets:
        return result
    writer = (sink or TextSink(out)).round(result.round_name)

    def one(target: Target) -> tuple[Target, str | None, str | None, int]:
        try:
            text = scrape(target.url, timeout)
        except (OSError, ValueError) as exc:  # URLError, timeouts, refused, bad URL
            return target, None, _describe(exc), 0
        return target, text, None, epoch_ms(datetime.now(UTC))

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_SCRAPES, len(targets))) as pool:
        outcomes = list(pool.map(one, targets))
    # Files are written by this thread only, in target order, so names are stable.
    scraped: dict[str, str] = {}
    for target, text, error, scraped_ms in outcomes:
        if text is None:
            log.warning("cannot scrape %s: %s (skipped this round)", target.url, error)
            result.failed.append((target.url, error or "unknown error"))
            continue
        gateway_id = target.gateway_id or gateway_id_from_text(text) or fallback_id(target.url)
        if gateway_id in scraped:
            # One gateway reached through two URLs: keeping both would count it twice.
            log.warning(
                "%s and %s are the same gateway (%s); keeping the first",
                scraped[gateway_id],
                target.url,
                gateway_id,
            )
            continue
        scraped[gateway_id] = target.url
        meta = ScrapeMeta(gateway_id, target.url, scraped_ms, "scrape")
        result.written.append(writer.write(meta, text))
    return result


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


# -- Prometheus query_range import ----------------------------------------------------------


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
            f"cannot query Prometheus at {base} ({_describe(exc)}); check --prometheus"
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


# -- ZooKeeper ------------------------------------------------------------------------------


class Registry:
    """A started FeatureStore for the whole collect run (one ZooKeeper session)."""

    def __init__(self, connect: str, chroot: str, timeout_s: float) -> None:
        from gateway.features.store import FeatureStore, make_client

        self.connect = connect
        self.chroot = chroot
        self.client = make_client(connect, timeout_s=timeout_s)
        self.client.start(timeout=timeout_s)
        self.store = FeatureStore(self.client, chroot)

    def snapshot(self) -> StateSnapshot:
        """Finalized levels and registrations now; ConnectionLoss while disconnected.

        Without the check, a read issued while kazoo reconnects waits for the
        connection to come back, and the round (and its scrapes) with it.
        """
        if not self.client.connected:
            raise ConnectionLoss(f"not connected to {self.connect}")
        return StateSnapshot(
            time_ms=epoch_ms(datetime.now(UTC)),
            finalized=self.store.read(),
            registrations=tuple(self.store.registrations()),
            zookeeper=self.connect,
            chroot=self.store.paths.chroot,
        )

    def close(self) -> None:
        self.client.stop()
        self.client.close()


# -- CLI ------------------------------------------------------------------------------------


def add_collect_subcommand(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = add_command(
        subparsers,
        "collect",
        help_text="scrape every live gateway's /metrics into a dataset for 'featurectl plan'",
        description=(
            "Find the live gateways in ZooKeeper (plus --gateway URLs), scrape their "
            "Prometheus /metrics every --interval seconds into a Parquet dataset in DIR, and "
            "snapshot the finalized levels and registrations into DIR/state/ so 'featurectl "
            "plan' can run offline. --prometheus pulls the same series from a Prometheus "
            "server instead (query_range, paged in time); --from-prometheus imports "
            "query_range exports."
        ),
        epilog=EPILOG,
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="dataset directory")
    parser.add_argument(
        "--zookeeper",
        metavar="CONNECT",
        default=os.environ.get(ZOOKEEPER_ENV) or None,
        help=f"ZooKeeper connect string (host:port[,...]) to find live gateways [${ZOOKEEPER_ENV}]",
    )
    parser.add_argument(
        "--chroot", default=DEFAULT_CHROOT, help="gateways' ZooKeeper chroot [%(default)s]"
    )
    parser.add_argument(
        "--gateway",
        action="append",
        default=[],
        metavar="URL",
        help="a /metrics URL to scrape as well, e.g. http://gw-0:9404/metrics (repeatable)",
    )
    parser.add_argument(
        "--from-prometheus",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="import a Prometheus /api/v1/query_range JSON export (repeatable)",
    )
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="pull the gateways' series from this Prometheus (/api/v1/query_range) instead",
    )
    parser.add_argument(
        "--range",
        type=duration_arg,
        default=duration_arg("7d"),
        metavar="DURATION",
        help="with --prometheus: how far back from --end, e.g. 7d, 12h [7d]",
    )
    parser.add_argument(
        "--step",
        type=duration_arg,
        default=duration_arg("1m"),
        metavar="DURATION",
        help="with --prometheus: time between samples, e.g. 1m, 15s [1m]",
    )
    parser.add_argument(
        "--end",
        type=time_arg,
        metavar="TIME",
        help="with --prometheus: end of the range, RFC 3339 or Unix seconds [now]",
    )
    parser.add_argument(
        "--format",
        choices=("parquet", "text"),
        default="parquet",
        help="parquet: DIR/samples/ (what plan reads fastest); text: DIR/scrapes/, one "
        "Prometheus text file per scrape (the old layout) [parquet]",
    )
    parser.add_argument(
        "--flush",
        type=_positive_float,
        default=DEFAULT_FLUSH_S,
        metavar="S",
        help=f"parquet: write buffered scrapes to a file every S seconds [{DEFAULT_FLUSH_S:g}]",
    )
    parser.add_argument(
        "--interval",
        type=_positive_float,
        default=DEFAULT_INTERVAL_S,
        metavar="S",
        help=f"seconds between rounds [{DEFAULT_INTERVAL_S:g}]",
    )
    rounds = parser.add_mutually_exclusive_group()
    rounds.add_argument("--once", action="store_true", help="one round, then exit")
    rounds.add_argument(
        "--rounds", type=int, metavar="N", help="stop after N rounds [until Ctrl-C/SIGTERM]"
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=SCRAPE_TIMEOUT_S,
        metavar="S",
        help=f"per-scrape and ZooKeeper timeout [{SCRAPE_TIMEOUT_S:g}]",
    )
    parser.set_defaults(handler=run_collect, parser=parser)
    return parser


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def run_collect(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="featurectl collect: %(message)s")
    if not (args.zookeeper or args.gateway or args.from_prometheus or args.prometheus):
        print(
            "featurectl collect: nothing to collect from; give --zookeeper CONNECT, "
            "--gateway URL, --prometheus URL or --from-prometheus FILE (see --help)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.rounds is not None and args.rounds < 1:
        print("featurectl collect: --rounds must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.out)
    sink: Sink = SampleSink(out) if args.format == "parquet" else TextSink(out)
    total = 0
    try:
        total += len(import_exports(out, args.from_prometheus, sink=sink))
        if args.prometheus:
            total += _pull(args, sink)
    except (ExportError, PrometheusError) as exc:
        print(f"featurectl collect: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        sink.flush()
    if not (args.zookeeper or args.gateway):
        return _finish(out, total, rounds=0)

    registry = None
    if args.zookeeper:
        try:
            registry = Registry(args.zookeeper, args.chroot, args.timeout)
        except Exception as exc:  # kazoo raises its own timeout types, and ValueError
            print(
                f"featurectl collect: cannot connect to ZooKeeper {args.zookeeper}: "
                f"{exc or type(exc).__name__}; check the connect string and that it is up",
                file=sys.stderr,
            )
            return EXIT_USAGE
    rounds = 1 if args.once else args.rounds
    stop = _stop_event()
    done = 0
    registered: list[Target] = []
    flushed = time.monotonic()
    try:
        while True:
            written, registered = _one_round(out, registry, args, registered, sink)
            total += written
            done += 1
            if rounds is not None and done >= rounds:
                break
            if time.monotonic() - flushed >= args.flush:
                sink.flush()
                flushed = time.monotonic()
            if stop.wait(args.interval):
                break
    finally:
        # Also on Ctrl-C/SIGTERM (the loop ends after its round): nothing buffered is lost.
        sink.flush()
        if registry is not None:
            registry.close()
    return _finish(out, total, rounds=done)


def _pull(args: argparse.Namespace, sink: Sink) -> int:
    """``--prometheus``: the samples of ``--range`` before ``--end`` at ``--step``."""
    end = args.end if args.end is not None else time.time()
    start = end - args.range
    if args.step > args.range:
        raise PrometheusError(f"--step {args.step:g}s is longer than --range {args.range:g}s")
    samples = pull_prometheus(args.prometheus, start, end, args.step, sink, timeout=args.timeout)
    if samples == 0:
        log.warning(
            "%s has no kafka_gateway_* series between %s and %s",
            args.prometheus,
            datetime.fromtimestamp(start, UTC).isoformat(),
            datetime.fromtimestamp(end, UTC).isoformat(),
        )
    else:
        log.info("pulled %d samples from %s", samples, args.prometheus)
    return samples


def _one_round(
    out: Path,
    registry: Registry | None,
    args: argparse.Namespace,
    known: list[Target],
    sink: Sink,
) -> tuple[int, list[Target]]:
    """One round; returns the files written and the registered targets it used.

    ``known``: the registered targets of the previous round, scraped again when
    ZooKeeper cannot be read (a ZooKeeper outage is when metrics matter most).
    """
    registered = known
    if registry is not None:
        try:
            snapshot = registry.snapshot()
        except (KazooException, KazooTimeoutError) as exc:
            log.warning(
                "cannot read ZooKeeper this round (%s: %s); scraping the %d gateway(s) of the "
                "last round, no state snapshot",
                type(exc).__name__,
                exc,
                len(known),
            )
        else:
            write_state_file(out, snapshot)
            registered, without = targets_from_registry(snapshot.registrations)
            if without:
                log.warning(
                    "gateways registered without a metrics_url (start them with "
                    "--metrics-listen): %s",
                    ", ".join(without),
                )
            if not snapshot.registrations:
                log.warning("no live gateway is registered under %s", registry.chroot)
    result = collect_round(
        out, merge_targets(registered, args.gateway), timeout=args.timeout, sink=sink
    )
    log.info(
        "round %s: %d scraped, %d unreachable",
        result.round_name,
        len(result.written),
        len(result.failed),
    )
    return len(result.written), registered


def _stop_event() -> threading.Event:
    """Set on SIGINT/SIGTERM so a sleeping loop ends after the round in progress."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        log.info("stopping after this round (signal %d)", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
    return stop


def _finish(out: Path, total: int, rounds: int) -> int:
    if total == 0:
        print(
            f"featurectl collect: nothing collected into {out} after {rounds} round(s); "
            "see the warnings above",
            file=sys.stderr,
        )
        return EXIT_NOTHING
    print(f"featurectl collect: collected into {out}; next: featurectl plan --metrics {out}")
    return EXIT_OK


__all__ = [
    "ExportError",
    "RoundResult",
    "Target",
    "add_collect_subcommand",
    "collect_round",
    "export_to_exposition",
    "gateway_id_from_text",
    "import_exports",
    "merge_targets",
    "read_export",
    "run_collect",
    "scrape",
    "targets_from_registry",
]
