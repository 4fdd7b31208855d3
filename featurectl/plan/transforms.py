"""The planner's pure DataFrame transformations (no I/O: frames in, frames out).

Frames and their columns:

* lines, scrapes: as ``featurectl.plan.exposition`` reads them
* samples: ``ts`` (timestamp), ``gateway_id``, ``metric``, ``labels`` (map) or
  ``label_text`` (as written), ``value``
* keyed samples: samples with ``label_text`` and ``label_id``, a hash of metric and
  label text. A fleet repeats a few thousand label sets in every scrape, so the planner
  parses each distinct one once (``label_sets``) instead of once per sample, and keys a
  counter series by gateway and ``label_id``.
* label sets: ``label_id`` and ``PLAN_LABELS`` as columns (integers cast)
* labelled samples: ``ts``, ``gateway_id``, ``metric``, ``value`` and ``PLAN_LABELS``
  (for the small metrics: gauges, info)
* support: ``gateway_id``, ``feature``, ``min_level``, ``max_level`` (per live gateway)
* finalized: ``feature``, ``level``
* increases: the counter's samples with ``increase`` (``counter_increases``), which
  ``request_usage`` adds up per series and chart bucket; with ``connections_by_bucket``
  these are the second pass's few thousand rows, joined to their labels and grouped
  further on the driver (``featurectl.plan.tally``).

Counters (``requests_total``) are read as increases between consecutive samples of a
series, a drop meaning a reset (the gateway restarted, the count began again from 0).
The first sample of a series counts as a baseline, except when the series was born
after its gateway's first scrape (the gateway creates a series at 0 when it first sees
that client/API/version) or when the gateway was scraped once (nothing else to go by;
counting the total since the gateway started over-reports, the safe direction for a
downgrade).

Every function runs under Spark's ANSI mode (the 4.x default): casts of label text use
``try_cast`` so a malformed value becomes null instead of failing the job.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from gateway.observability.traffic_metrics import TRAFFIC_LABELS

from .decide import CLIENT
from .exposition import parse_labels

REQUESTS = "kafka_gateway_requests_total"
CONNECTIONS = "kafka_gateway_connections_active"
FINALIZED_LEVEL = "kafka_gateway_feature_finalized_level"
FINALIZED_EPOCH = "kafka_gateway_feature_finalized_epoch"
SUPPORTED_MIN = "kafka_gateway_feature_supported_min_level"
SUPPORTED_MAX = "kafka_gateway_feature_supported_max_level"
INFO = "kafka_gateway_info"
# Refused requests: ``reason`` always; newer gateways add the traffic labels too.
REJECTED = "kafka_gateway_rejected_requests_total"
PLAN_METRICS = (
    REQUESTS,
    REJECTED,
    CONNECTIONS,
    FINALIZED_LEVEL,
    FINALIZED_EPOCH,
    SUPPORTED_MIN,
    SUPPORTED_MAX,
    INFO,
)
# The labels of a requests_total series: the gateway's traffic labels.
REQUEST_LABELS = TRAFFIC_LABELS
# The labels the planner reads, flattened from the map; integers are cast once here.
PLAN_LABELS = (
    *REQUEST_LABELS,
    "reason",
    "feature",
    "gateway_version",
    "broker_software_name",
    "broker_software_version",
    "upstream",
    "protocol_kafka",
)
# kafka_gateway_info's own gateway_id label, under another name: the samples' gateway_id
# column is the collector's name for the gateway, and the two must not clash in joins.
INFO_GATEWAY_ID = "info_gateway_id"
_INT_LABELS = ("api_key", "api_version")
# The rows of ``label_sets``, as a schema to build that frame again from rows collected.
LABEL_SETS_SCHEMA = ", ".join(
    [
        "label_id long",
        *(f"{k} {'int' if k in _INT_LABELS else 'string'}" for k in PLAN_LABELS),
        f"{INFO_GATEWAY_ID} string",
    ]
)
# A sample as both formats give it (text after ``attach_scrapes``, Parquet as stored).
SAMPLE_COLUMNS = ("ts", "gateway_id", "metric", "label_text", "value")


def key_samples(samples: DataFrame) -> DataFrame:
    """Samples (with ``label_text``) plus ``label_id``: xxhash64 of metric and label text.

    A series is then a gateway and a ``label_id``: the label text as the gateway wrote
    it (one exporter always writes a family's labels in the same order).
    """
    return samples.withColumn("label_id", F.xxhash64("metric", "label_text"))


def label_sets(keyed: DataFrame) -> DataFrame:
    """One row per distinct ``label_id``: its labels parsed, ``PLAN_LABELS`` as columns."""
    distinct = keyed.groupBy("label_id").agg(F.first("label_text").alias("label_text"))
    columns = []
    for key in PLAN_LABELS:
        value = F.col("labels").getItem(key)
        if key in _INT_LABELS:
            value = value.try_cast("int")
        columns.append(value.alias(key))
    columns.append(F.col("labels").getItem("gateway_id").alias(INFO_GATEWAY_ID))
    return parse_labels(distinct).select("label_id", *columns)


def labelled(keyed: DataFrame, labels: DataFrame, metrics: Sequence[str]) -> DataFrame:
    """The samples of ``metrics`` with their ``PLAN_LABELS`` (meant for the small ones)."""
    return (
        keyed.where(F.col("metric").isin(*metrics))
        .select("ts", "gateway_id", "metric", "value", "label_id")
        .join(F.broadcast(labels), "label_id")
        .drop("label_id")
    )


def gateway_spans(samples: DataFrame) -> DataFrame:
    """Per gateway: first and last sample time, how many distinct times it has, and
    how many samples (summed over gateways: the planner's samples, with no extra job)."""
    return samples.groupBy("gateway_id").agg(
        F.min("ts").alias("first_ts"),
        F.max("ts").alias("last_ts"),
        F.count_distinct("ts").alias("scrapes"),
        F.count(F.lit(1)).alias("samples"),
    )


def _series_id() -> Column:
    # Sorting and shuffling one long instead of a gateway id and a label text is what
    # makes the per-sample pass cheap. Two of a fleet's few thousand series colliding in
    # 64 bits is about as likely as 1 in 10^12.
    return F.xxhash64("gateway_id", "label_id").alias("series")


def counter_increases(keyed: DataFrame, spans: DataFrame, metric: str = REQUESTS) -> DataFrame:
    """Each sample of counter ``metric`` with ``increase`` since the series' previous one.

    Rows are narrow (``series``, ``gateway_id``, ``label_id``, ``ts``, ``value``,
    ``increase``); the labels of a series are its ``label_id``'s (``label_sets``). A drop
    is a reset: the new value is all increase. The first sample is a baseline (0) unless
    the series is newborn or its gateway has a single scrape (see the module doc).
    """
    series = Window.partitionBy("series").orderBy("ts")
    prev = F.lag("value").over(series)
    first = F.when(F.col("first_counts"), F.col("value")).otherwise(F.lit(0.0))
    return (
        keyed.where(F.col("metric") == metric)
        .join(F.broadcast(spans.select("gateway_id", "first_ts", "scrapes")), "gateway_id")
        # Whether a first sample counts is known per row before the sort: one boolean
        # travels through the shuffle instead of the gateway's span.
        .select(
            _series_id(),
            "gateway_id",
            "label_id",
            "ts",
            "value",
            ((F.col("ts") > F.col("first_ts")) | (F.col("scrapes") == 1)).alias("first_counts"),
        )
        .withColumn(
            "increase",
            F.when(prev.isNull(), first)
            .when(F.col("value") >= prev, F.col("value") - prev)
            .otherwise(F.col("value")),
        )
        .drop("first_counts")
    )


def request_usage(increases: DataFrame, bucket_s: int, gated: Sequence[int]) -> DataFrame:
    """What ``counter_increases`` adds up to, in one aggregation of two grouping sets.

    * per series (``series``, ``gateway_id``, ``label_id``): ``requests`` (sum of
      increases), ``first_seen`` (the first sample where the series had counted
      anything) and ``last_seen`` (the last sample where it grew; null: no request in
      the window);
    * per gated label set and time bucket (``label_id`` in ``gated``, ``bucket``, and
      ``series`` null): ``requests`` in that bucket, for the chart.

    One aggregation so that the sort by series and time behind the increases runs once;
    both sets are a few thousand rows, joined to their labels on the driver.
    """
    gated_bucket = (
        F.when(F.col("label_id").isin(*gated), _bucket(bucket_s))
        if gated
        else F.lit(None).cast("long")
    )
    return (
        increases.withColumn("bucket", gated_bucket)
        .groupingSets(
            [["series", "gateway_id", "label_id"], ["label_id", "bucket"]],
            "series",
            "gateway_id",
            "label_id",
            "bucket",
        )
        .agg(
            F.sum("increase").alias("requests"),
            F.min(F.when(F.col("value") > 0, F.col("ts"))).alias("first_seen"),
            F.max(F.when(F.col("increase") > 0, F.col("ts"))).alias("last_seen"),
        )
        # The second set's rows of ungated label sets (bucket null) are not wanted.
        .where(F.col("series").isNotNull() | F.col("bucket").isNotNull())
    )


def refusal_usage(increases: DataFrame) -> DataFrame:
    """Per series of the refusal counter (``counter_increases(..., REJECTED)``):
    ``requests`` refused, ``first_seen``/``last_seen`` (the first and last sample where
    it grew). A few rows: refusals are labelled by reason, API and client at most."""
    return increases.groupBy("series", "gateway_id", "label_id").agg(
        F.sum("increase").alias("requests"),
        F.min(F.when(F.col("increase") > 0, F.col("ts"))).alias("first_seen"),
        F.max(F.when(F.col("increase") > 0, F.col("ts"))).alias("last_seen"),
    )


def connections_by_bucket(samples: DataFrame, spans: DataFrame, bucket_s: int) -> DataFrame:
    """Connections per client software and time bucket, summed over gateways.

    At each sample time the gateways' gauges add up (collect writes one time per round);
    per bucket: ``connections`` (the mean of those sums), ``peak`` (their highest) and
    ``now`` (what the gateways' last scrapes hold, null when none falls in the bucket).
    The chart takes the means; per client, the highest peak and the sum of ``now``
    are the connections at peak and now (on the driver: a bucket per row).
    """
    gauge = samples.where(F.col("metric") == CONNECTIONS).join(
        F.broadcast(spans.select("gateway_id", "last_ts")), "gateway_id"
    )
    per_time = gauge.groupBy("ts", *CLIENT).agg(
        F.sum("value").alias("total"),
        F.sum(F.when(F.col("ts") == F.col("last_ts"), F.col("value"))).alias("now"),
    )
    return per_time.groupBy(_bucket(bucket_s).alias("bucket"), *CLIENT).agg(
        F.avg("total").alias("connections"),
        F.max("total").alias("peak"),
        F.sum("now").alias("now"),
    )


def latest_per_gateway(samples: DataFrame, spans: DataFrame, metric: str) -> DataFrame:
    """Samples of ``metric`` at each gateway's last scrape."""
    return (
        samples.where(F.col("metric") == metric)
        .join(F.broadcast(spans.select("gateway_id", "last_ts")), "gateway_id")
        .where(F.col("ts") == F.col("last_ts"))
        .drop("last_ts")
    )


def support_from_metrics(samples: DataFrame, spans: DataFrame) -> DataFrame:
    """The support frame from supported_min/max_level gauges (when no registry is known)."""
    low = latest_per_gateway(samples, spans, SUPPORTED_MIN).select(
        "gateway_id", "feature", F.col("value").cast("int").alias("min_level")
    )
    high = latest_per_gateway(samples, spans, SUPPORTED_MAX).select(
        "gateway_id", "feature", F.col("value").cast("int").alias("max_level")
    )
    return high.join(low, ["gateway_id", "feature"], "left").fillna(0, ["min_level"])


def finalized_from_metrics(samples: DataFrame) -> DataFrame:
    """Finalized levels as the most recent sample (over all gateways) reports them.

    A level of 0 means "not finalized" and is left out, like the feature znode does.
    """
    level = samples.where(F.col("metric") == FINALIZED_LEVEL)
    newest = level.groupBy("feature").agg(F.max("ts").alias("ts"))
    return (
        level.join(newest, ["feature", "ts"])
        .groupBy("feature")
        .agg(F.max("value").cast("int").alias("level"))
        .where(F.col("level") >= 1)
    )


# -- time buckets for the charts ------------------------------------------------------------


def _bucket(bucket_s: int) -> Column:
    """The start (epoch seconds) of the ``bucket_s`` long chart bucket holding ``ts``."""
    seconds = F.unix_seconds(F.col("ts"))
    return (F.floor(seconds / bucket_s) * bucket_s).cast("long")


__all__ = [
    "CLIENT",
    "CONNECTIONS",
    "INFO",
    "LABEL_SETS_SCHEMA",
    "PLAN_LABELS",
    "PLAN_METRICS",
    "REJECTED",
    "REQUESTS",
    "connections_by_bucket",
    "counter_increases",
    "finalized_from_metrics",
    "gateway_spans",
    "key_samples",
    "label_sets",
    "labelled",
    "latest_per_gateway",
    "refusal_usage",
    "request_usage",
    "support_from_metrics",
]
