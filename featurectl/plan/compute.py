"""The Spark side of a plan: read the samples, run the two passes, collect the small
results, and add them up on the driver into ``PlanData``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from featurectl.plan.layout import epoch_ms
from featurectl.plan.live_state import metrics_state, metrics_state_frames, snapshot_state
from featurectl.plan.model import PlanData, PlanInputs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Chart resolution: at most this many time buckets per chart (one per scrape is noise).
CHART_BUCKETS = 120


class _Clock:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round(now - self._last, 3)
        self._last = now


def compute_plan(spark: SparkSession, inputs: PlanInputs) -> PlanData:
    """Run the Spark side: read, transform, collect the small results.

    Two passes over the samples, each one query collected once: the gateway spans and
    label sets, which the second pass is planned from, then everything else (usage per
    series, chart buckets, connections, and the state when only the gauges tell it).
    What those few thousand rows add up to is Python on the driver (``tally``,
    ``decide``): a run used to be ~40 short Spark jobs, and planning and JIT-compiling
    them was most of a 10M-sample run (docs/planner.md#few-spark-jobs).
    """
    from pyspark.sql import functions as F

    from featurectl.plan import caps, clients, decide, readers, readiness, tally
    from featurectl.plan import transforms as tx

    clock = _Clock()
    root = readers.dataset_uri(inputs.metrics)
    dataset_samples = readers.read_samples(
        spark,
        root,
        metrics=tx.PLAN_METRICS,
        parse_labels=False,
        since=inputs.since,
        until=inputs.until,
    )
    keyed = tx.key_samples(dataset_samples.frame)
    if dataset_samples.text_count is not None:
        # Text lines are parsed per pass: parse them once. Parquet is read again
        # instead; reading the columns a pass needs costs less than building a cache.
        keyed = keyed.cache()
    spans_exact = tx.gateway_spans(keyed).withColumns(
        {"first_us": F.unix_micros("first_ts"), "last_us": F.unix_micros("last_ts")}
    )
    span_rows, label_rows = _collect_together(spans_exact, tx.label_sets(keyed))
    if not span_rows:
        raise readers.DatasetError(
            f"{inputs.metrics} has no kafka_gateway_* samples the planner reads; "
            "check that the scraped URLs are kafka-gateway /metrics endpoints"
        )
    total_samples = dataset_samples.total()
    clock.lap("parse")

    snapshot = snapshot_state(spark, inputs, root)
    clock.lap("state")

    # The second pass joins these back as small local frames, times as exact integers
    # (a Python datetime would go through the driver's time zone and back).
    spans = _local_frame(
        spark, span_rows, "gateway_id string, first_us long, last_us long, scrapes long"
    ).select(
        "gateway_id",
        F.timestamp_micros("first_us").alias("first_ts"),
        F.timestamp_micros("last_us").alias("last_ts"),
        "scrapes",
    )
    labels_frame = _local_frame(spark, label_rows, tx.LABEL_SETS_SCHEMA)
    levels = tally.gated_levels(inputs.catalogue, label_rows)
    first = min(r["first_ts"] for r in span_rows)
    last = max(r["last_ts"] for r in span_rows)
    bucket_s = max(1, int((last - first).total_seconds() / CHART_BUCKETS) + 1)
    increases = tx.counter_increases(keyed, spans)
    counters = (tx.REQUESTS, tx.REJECTED)
    gauges = [m for m in tx.PLAN_METRICS if m not in counters] if snapshot is None else []
    small = tx.labelled(keyed, labels_frame, [tx.CONNECTIONS, *gauges])
    frames = [
        tx.request_usage(increases, bucket_s, tally.gated_label_ids(label_rows, levels)),
        tx.connections_by_bucket(small, spans, bucket_s),
        tx.refusal_usage(tx.counter_increases(keyed, spans, tx.REJECTED)),
    ]
    if snapshot is None:
        frames += metrics_state_frames(small, spans)
    usage_rows, connection_rows, refusal_rows, *state_rows = (
        [_row(r) for r in part] for part in _collect_together(*frames)
    )
    state = snapshot or metrics_state(inputs, *state_rows)
    if dataset_samples.text_count is not None:
        keyed.unpersist()

    labels = {r["label_id"]: _row(r) for r in label_rows}
    usage = tally.api_usage((r for r in usage_rows if r["series"] is not None), labels)
    client_dicts = tally.gated_clients(usage, levels, tally.connections_per_client(connection_rows))
    clock.lap("clients")

    # The decisions are Python on the driver: their inputs are a few dozen rows.
    catalogue = {name: spec.max_level for name, spec in inputs.catalogue.items()}
    features = decide.feature_levels(catalogue, state.gateway_ids, state.support, state.finalized)
    brokers = [
        r["broker_finalized"]
        for r in state.doc.get("registrations", [])
        if r.get("broker_finalized") is not None
    ]
    for f in features:
        # What the live gateways' brokers finalized (each registers its upstream's): a
        # level above the gateways' is withheld from clients, and the plan says so.
        f["broker_finalized_level"] = min(
            (levels.get(f["feature"], 0) for levels in brokers), default=None
        )
    # --release alone plans the release, not every feature's highest level besides.
    targets = dict(inputs.targets) or ({} if inputs.releases else _default_targets(features))
    blocker_rows = decide.blocking_gateways(targets, state.gateway_ids, state.support)
    verdict_rows = decide.verdicts(
        targets, state.finalized, blocker_rows, client_dicts, len(state.gateway_ids)
    )
    who = _who(inputs, labels, refusal_rows, usage, client_dicts, levels)
    clients.annotate_verdicts(verdict_rows, client_dicts, inputs.catalogue, who["index"])
    registrations = {r["gateway_id"]: r for r in state.doc.get("registrations", [])}
    cap_evidence = (inputs.catalogue, registrations, who["refusals"], state.support)
    for b in blocker_rows:
        b.update(caps.cap_fields(b, *cap_evidence))
    for f in features:
        # Why the highest level everywhere is below the catalogue's: the gateways at it.
        high = f["cluster_max_level"]
        if high is None or high >= f["catalogue_max_level"]:
            continue
        capped = decide.blocking_gateways(
            {f["feature"]: high + 1}, state.gateway_ids, state.support
        )
        f["capped_by"] = [{**b, **caps.cap_fields(b, *cap_evidence)} for b in capped]
    broken, wanting = clients.classify_refusals(
        who["refusals"], inputs.catalogue, state.finalized, features, usage, who["index"],
        state.doc,
    )  # fmt: skip
    infos = readiness.gateway_infos(
        label_rows, state.doc.get("registrations", []), state.gateway_ids
    )
    releases = [
        readiness.readiness(r, usage, who["index"], infos, state, inputs.catalogue)
        for r in inputs.releases
    ]
    clock.lap("verdicts")

    connections_series = tally.connections_series(connection_rows)
    gated_series = tally.gated_series(
        (r for r in usage_rows if r["series"] is None), labels, levels, bucket_s
    )
    clock.lap("charts")

    dataset = {
        "path": inputs.metrics,
        "samples": total_samples,
        "planner_samples": sum(r["samples"] for r in span_rows),
        "gateways": len(span_rows),
        "scrapes": sum(r["scrapes"] for r in span_rows),
        "start_ms": epoch_ms(first),
        "end_ms": epoch_ms(last),
        "gateway_spans": sorted(
            (
                {
                    "gateway_id": r["gateway_id"],
                    "first_ms": epoch_ms(r["first_ts"]),
                    "last_ms": epoch_ms(r["last_ts"]),
                    "scrapes": r["scrapes"],
                }
                for r in span_rows
            ),
            key=lambda g: g["gateway_id"],
        ),
    }
    return PlanData(
        dataset=dataset,
        state=state.doc,
        features=features,
        verdicts=verdict_rows,
        blockers=blocker_rows,
        clients=sorted(
            client_dicts,
            key=lambda c: (c["feature"], -c["level"], -c["requests"], c["client_software_name"]),
        ),
        usage=usage,
        connections_series=connections_series,
        gated_series=gated_series,
        timings=clock.timings,
        refusals=who["refusals"],
        broken_now=broken,
        negotiated=clients.negotiated(who["refusals"]),
        wanting=wanting,
        versions_by_client=who["versions"],
        identities=who["identities"],
        releases=releases,
    )


def _who(
    inputs: PlanInputs,
    labels: Mapping[int, Mapping[str, Any]],
    refusal_rows: Sequence[Mapping[str, Any]],
    usage: Sequence[Mapping[str, Any]],
    client_dicts: Sequence[Mapping[str, Any]],
    levels: Mapping[tuple[int, int], tuple[str, int]],
) -> dict[str, Any]:
    """The clients' identities (the gateways' client records where the dataset has
    them), their refusals and the API-version-by-client rows."""
    from featurectl.plan import clients, tally
    from featurectl.plan import identities as records

    identities = records.load_identities(inputs.metrics)
    index = records.identity_index(identities)
    refusals = tally.refusal_usage(refusal_rows, labels)
    if identities and not any(records.attributed(r) for r in refusals):
        # An older counter (reason only): the records say who was refused what.
        refusals = records.refusals_from_identities(identities) or refusals
    gated = {(c["api_key"], c["api_version"]) for c in client_dicts} | set(levels)
    return {
        "index": index,
        "identities": len(identities),
        "refusals": refusals,
        "versions": clients.versions_by_client(usage, gated, index, refusals),
    }


def _collect_together(*frames: DataFrame) -> list[list[dict[str, Any]]]:
    """The rows of each (small) frame, as plain dicts, from one query: one job graph to
    plan and run instead of one per frame. Columns of the same name must have one type."""
    from pyspark.sql import functions as F

    columns = [frame.columns for frame in frames]
    tagged = [frame.withColumn("_part", F.lit(i)) for i, frame in enumerate(frames)]
    union = tagged[0]
    for frame in tagged[1:]:
        union = union.unionByName(frame, allowMissingColumns=True)
    parts: list[list[dict[str, Any]]] = [[] for _ in frames]
    for row in union.collect():
        part = row["_part"]
        parts[part].append({c: row[c] for c in columns[part]})
    return parts


# Arrow types of the simple DDL types ``_local_frame`` is given.
_ARROW_TYPES = {"string": "string", "long": "int64", "int": "int32"}


def _local_frame(spark: SparkSession, rows: Sequence[Mapping[str, Any]], ddl: str) -> DataFrame:
    """A frame of ``rows`` (the columns ``ddl`` names, as ``name type, ...``) held in the
    query plan itself. From an Arrow table Spark makes a local relation: joining it
    takes no job, where rows from Python become an RDD whose broadcast runs a job with
    Python workers (~1 s of a 10M-sample run)."""
    import pyarrow as pa

    fields = [field.split() for field in ddl.split(", ")]
    schema = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in fields])
    table = pa.Table.from_pylist([{name: r[name] for name, _ in fields} for r in rows], schema)
    return spark.createDataFrame(table)


def _default_targets(features: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Per feature, the highest level every live gateway supports, when above finalized."""
    return {
        f["feature"]: f["cluster_max_level"]
        for f in features
        if f["cluster_max_level"] is not None and f["cluster_max_level"] > f["finalized_level"]
    }


def _row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A collected row as plain JSON-able Python: timestamps become epoch milliseconds."""
    from pyspark.sql import Row

    def plain(value: Any) -> Any:
        if isinstance(value, Row):
            return {k: plain(v) for k, v in value.asDict().items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, datetime):
            return epoch_ms(value)
        return value

    return {k: plain(v) for k, v in row.items()}


__all__ = ["CHART_BUCKETS", "compute_plan"]
