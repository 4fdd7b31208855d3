"""Scraping the gateways' Prometheus /metrics for ``featurectl collect``.

One round scrapes every target concurrently (a slow gateway costs one timeout, not one
per gateway) and hands each answer, under the gateway id it names, to a sink: the
Parquet dataset (``featurectl.plan.columnar``) or the text layout
(``featurectl.plan.layout``). Next to /metrics it fetches the gateway's /clients (the
client identities it saw, ``gateway.client_records``) for ``featurectl.plan.clients_dataset``.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .plan.clients_dataset import ClientSink
from .plan.columnar import SampleSink
from .plan.layout import ScrapeMeta, TextSink, epoch_ms, stamp

# collect's own logger: its messages are one stream to the operator, whichever module.
log = logging.getLogger("featurectl.collect")

# Per-request timeout: a hung gateway must not stall a round past its interval.
SCRAPE_TIMEOUT_S = 5.0
# Scrapes run concurrently so one slow gateway costs one timeout, not one per gateway.
MAX_PARALLEL_SCRAPES = 16
# Prometheus' own Accept header for the text format; prometheus_client answers with it.
ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
INFO_METRIC = "kafka_gateway_info"


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


def clients_url(metrics_url: str) -> str:
    """The /clients URL beside a /metrics URL (``http://gw:9404/metrics`` ->
    ``http://gw:9404/clients``)."""
    parts = urlsplit(metrics_url)
    path = parts.path
    if path.endswith("/metrics"):
        path = path[: -len("metrics")] + "clients"
    else:
        path = path.rstrip("/") + "/clients"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def fetch_clients(url: str, timeout: float = SCRAPE_TIMEOUT_S) -> list[dict[str, Any]]:
    """GET a gateway's /clients records (raises OSError/ValueError: none, e.g. a
    gateway from before /clients, which answers 404)."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        doc = json.loads(response.read().decode(response.headers.get_content_charset() or "utf-8"))
    if not isinstance(doc, list) or not all(
        isinstance(entry, dict) and "client_id" in entry for entry in doc
    ):
        raise ValueError("not a /clients answer")
    return doc


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
    clients: ClientSink | None = None,
) -> RoundResult:
    """Scrape ``targets`` concurrently into ``sink`` (default: text files under ``out``),
    and with ``clients`` their /clients into it.

    Failures are logged and listed in the result (a gateway without /clients is
    scraped all the same).
    """
    started = now or datetime.now(UTC)
    result = RoundResult(stamp(started))
    if not targets:
        return result
    writer = (sink or TextSink(out)).round(result.round_name)

    def one(target: Target) -> tuple[Target, str | None, str | None, int, list | None]:
        try:
            text = scrape(target.url, timeout)
        except (OSError, ValueError) as exc:  # URLError, timeouts, refused, bad URL
            return target, None, describe_error(exc), 0, None
        scraped_ms = epoch_ms(datetime.now(UTC))
        records = None
        if clients is not None:
            url = clients_url(target.url)
            try:
                records = fetch_clients(url, timeout)
            except (OSError, ValueError) as exc:
                log.debug("no client identities from %s: %s", url, describe_error(exc))
        return target, text, None, scraped_ms, records

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_SCRAPES, len(targets))) as pool:
        outcomes = list(pool.map(one, targets))
    # Files are written by this thread only, in target order, so names are stable.
    scraped: dict[str, str] = {}
    for target, text, error, scraped_ms, records in outcomes:
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
        if clients is not None and records is not None:
            clients.add(gateway_id, scraped_ms, records)
    return result


def describe_error(exc: BaseException) -> str:
    """What went wrong with an HTTP request, in a few words (for a log or error line)."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__
