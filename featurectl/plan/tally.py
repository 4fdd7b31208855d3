"""The planner's tallies, on the driver: usage per client software and API version, the
clients on gated versions, and the chart series.

Spark hands back one row per series, per label set and per chart bucket
(``transforms.request_usage``, ``label_sets``, ``connections_by_bucket``): a few
thousand rows whatever the number of samples. Grouping them further is plain Python
here, like the decisions (``decide``): as Spark queries these joins and groupings were
a dozen short jobs, each planned, code-generated and JIT-compiled for a few thousand
rows (docs/planner.md#few-spark-jobs).

Rows are plain dicts as ``compute._row`` makes them (times in epoch milliseconds):

* label sets: ``label_id`` and ``PLAN_LABELS``
* series: ``gateway_id``, ``label_id``, ``requests``, ``first_seen``, ``last_seen``
* buckets: ``label_id``, ``bucket``, ``requests`` (gated label sets only)
* connections: ``bucket``, ``CLIENT``, ``connections``, ``peak``, ``now``

Outputs are lists of plain dicts with the keys (and key order) ``plan.json`` has always
had, sorted where Spark used to hand them back in whatever order its partitions finished.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from gateway.features.catalogue import Catalogue, required_level

from .decide import CLIENT, nulls_first

Row = Mapping[str, Any]
Client = tuple[Any, ...]
# (api_key, api_version) -> (feature, level) it needs, for the gated ones only.
Levels = dict[tuple[int, int], tuple[str, int]]


def gated_levels(catalogue: Catalogue, label_rows: Iterable[Row]) -> Levels:
    """``required_level`` of each (api_key, api_version) the label sets name, gated ones only.

    The pairs come from the data (a few hundred at most), so the catalogue's own
    function decides, versions beyond any known schema included.
    """
    pairs = {
        (r["api_key"], r["api_version"])
        for r in label_rows
        if r["api_key"] is not None and r["api_version"] is not None
    }
    levels: Levels = {}
    for key, version in sorted(pairs):
        need = required_level(catalogue, key, version)
        if need is not None:
            levels[(key, version)] = need
    return levels


def gated_label_ids(label_rows: Iterable[Row], levels: Levels) -> list[int]:
    """The label sets of requests to an API version that needs a feature level."""
    return sorted(r["label_id"] for r in label_rows if (r["api_key"], r["api_version"]) in levels)


def _client(row: Row) -> Client:
    return tuple(row[c] for c in CLIENT)


def api_usage(series: Iterable[Row], labels: Mapping[int, Row]) -> list[dict[str, Any]]:
    """Per API version and client software: requests, first/last seen, gateways.

    Sums, minima and maxima skip nulls as SQL's do (null when there is nothing to take).
    """
    groups: dict[tuple[Any, ...], list[Row]] = defaultdict(list)
    for row in series:
        label = labels[row["label_id"]]
        groups[(label["api_key"], label["api"], label["api_version"], *_client(label))].append(row)
    out = []
    for key, rows in groups.items():
        requests = [r["requests"] for r in rows if r["requests"] is not None]
        first = [r["first_seen"] for r in rows if r["first_seen"] is not None]
        last = [r["last_seen"] for r in rows if r["last_seen"] is not None]
        out.append(
            {
                **dict(zip(("api_key", "api", "api_version", *CLIENT), key, strict=True)),
                "requests": sum(requests) if requests else None,
                "first_seen": min(first, default=None),
                "last_seen": max(last, default=None),
                "gateways": sorted({r["gateway_id"] for r in rows}),
            }
        )
    return out


def refusal_usage(series: Iterable[Row], labels: Mapping[int, Row]) -> list[dict[str, Any]]:
    """Per reason, API version and client software: requests refused, first/last seen,
    gateways (rows that refused nothing in the window left out). A gateway that labels
    refusals by ``reason`` only gives rows whose API and client are null."""
    groups: dict[tuple[Any, ...], list[Row]] = defaultdict(list)
    for row in series:
        label = labels[row["label_id"]]
        key = (label["reason"], label["api_key"], label["api"], label["api_version"])
        groups[(*key, *_client(label))].append(row)
    out = []
    for key, rows in groups.items():
        requests = sum(r["requests"] for r in rows if r["requests"] is not None)
        if requests <= 0:
            continue
        first = [r["first_seen"] for r in rows if r["first_seen"] is not None]
        last = [r["last_seen"] for r in rows if r["last_seen"] is not None]
        out.append(
            {
                **dict(zip(("reason", "api_key", "api", "api_version", *CLIENT), key, strict=True)),
                "requests": float(requests),
                "first_seen": min(first, default=None),
                "last_seen": max(last, default=None),
                "gateways": sorted({r["gateway_id"] for r in rows if r["requests"]}),
            }
        )
    return sorted(out, key=lambda r: (-r["requests"], *_order(*key_of(r))))


def key_of(row: Row) -> tuple[Any, ...]:
    return tuple(row[k] for k in ("reason", "api_key", "api_version", *CLIENT))


def connections_per_client(buckets: Iterable[Row]) -> dict[Client, tuple[float, float]]:
    """Per client software: (connections at peak, connections now), over all buckets."""
    peak: dict[Client, float] = {}
    now: dict[Client, list[float]] = defaultdict(list)
    for row in buckets:
        client = _client(row)
        peak[client] = max(peak.get(client, row["peak"]), row["peak"])
        if row["now"] is not None:
            now[client].append(row["now"])
    return {client: (peak[client], sum(now[client]) if now[client] else 0.0) for client in peak}


def gated_clients(
    usage: Iterable[Row], levels: Levels, connections: Mapping[Client, tuple[float, float]]
) -> list[dict[str, Any]]:
    """Usage rows of gated API versions, with their feature level and the connection
    counts of their client software (0 when unknown; a client without a name or version
    matches no connections, as an SQL join on nulls matches nothing)."""
    out = []
    for row in usage:
        need = levels.get((row["api_key"], row["api_version"]))
        if need is None:
            continue
        client = _client(row)
        peak, now = (0.0, 0.0) if None in client else connections.get(client, (0.0, 0.0))
        out.append(
            {
                **dict(zip(CLIENT, client, strict=True)),
                "api_key": row["api_key"],
                "api_version": row["api_version"],
                "api": row["api"],
                **{k: row[k] for k in ("requests", "first_seen", "last_seen", "gateways")},
                "feature": need[0],
                "level": need[1],
                "connections_peak": peak,
                "connections_now": now,
            }
        )
    return out


def _order(*values: Any) -> tuple[Any, ...]:
    return tuple(nulls_first(v) for v in values)


def connections_series(buckets: Iterable[Row]) -> list[dict[str, Any]]:
    """The connections chart: mean connections per bucket and client software."""
    rows = [
        {
            "bucket": r["bucket"],
            **dict(zip(CLIENT, _client(r), strict=True)),
            "connections": r["connections"],
        }
        for r in buckets
    ]
    return sorted(rows, key=lambda r: _order(r["bucket"], *_client(r)))


def gated_series(
    buckets: Iterable[Row], labels: Mapping[int, Row], levels: Levels, bucket_s: int
) -> list[dict[str, Any]]:
    """Requests per second needing each feature level, per client software and bucket."""
    totals: dict[tuple[Any, ...], float] = defaultdict(float)
    for row in buckets:
        label = labels[row["label_id"]]
        feature, level = levels[(label["api_key"], label["api_version"])]
        totals[(row["bucket"], feature, level, *_client(label))] += row["requests"]
    return [
        {
            **dict(zip(("bucket", "feature", "level", *CLIENT), key, strict=True)),
            "rate": total / bucket_s,
        }
        for key, total in sorted(totals.items(), key=lambda item: _order(*item[0]))
    ]


__all__ = [
    "api_usage",
    "connections_per_client",
    "connections_series",
    "gated_clients",
    "gated_label_ids",
    "gated_levels",
    "gated_series",
    "refusal_usage",
]
