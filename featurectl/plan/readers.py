"""Reading the dataset and the live state into DataFrames (the planner's only inputs).

Paths may be local directories or any URI Spark reads (``hdfs://``, ``s3a://``), so
the dataset is read through Spark, state snapshots included.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote

from pyspark.sql import DataFrame, DataFrameReader, Observation, SparkSession
from pyspark.sql import functions as F

from . import exposition as ex
from . import transforms as tx
from .clients_dataset import read_client_rows
from .columnar import DATE_PARTITION, PARQUET_SUFFIX, SAMPLES, SPARK_SCHEMA
from .layout import PROM_SUFFIX, SCRAPES, STATE, StateSnapshot, decode_name, round_time_ms


class DatasetError(Exception):
    """The metrics directory holds no usable dataset; the message says what to run."""


def dataset_uri(root: str) -> str:
    """A local directory as an absolute path (Spark resolves relative ones elsewhere)."""
    return root if "://" in root else str(Path(root).resolve())


def _files(spark: SparkSession, pattern: str) -> DataFrameReader:
    """A reader of the files matching ``pattern`` anywhere under the directory it reads.

    A directory and a filter rather than a glob path: Spark probes a single glob path
    for a streaming sink's metadata and logs a stack trace when there is none.
    """
    return spark.read.option("recursiveFileLookup", "true").option("pathGlobFilter", pattern)


def read_lines(spark: SparkSession, root: str) -> DataFrame:
    """Every line of every ``.prom`` file, keyed by ``<round>/<name>``."""
    try:
        text = _files(spark, f"*{PROM_SUFFIX}").text(f"{root}/{SCRAPES}")
    except Exception as exc:  # AnalysisException: PATH_NOT_FOUND for an empty glob
        raise DatasetError(
            f"no scrapes under {root}/{SCRAPES}/ ({_first_line(exc)}); "
            "run 'featurectl collect --out DIR' first"
        ) from None
    return text.select(
        ex.scrape_key(F.col("_metadata.file_path")).alias("source"), F.col("value").alias("line")
    )


def scrapes_frame(spark: SparkSession, paths: Iterable[str]) -> DataFrame:
    """``source``, ``gateway_id``, ``scrape_time_ms`` of each ``.prom`` file, from its path.

    Built on the driver from the file listing Spark already made (one row per file),
    so no sidecar is opened. Files outside the layout are left out, with their lines.
    """
    rows = []
    for path in paths:
        parts = path.rsplit("/", 2)
        if len(parts) < 3 or not parts[2].endswith(PROM_SUFFIX):
            continue
        round_name, stem = parts[1], parts[2][: -len(PROM_SUFFIX)]
        started = round_time_ms(round_name)
        if started is not None:
            # Paths are URIs; the key stays as Spark spells it, the id is unescaped.
            rows.append((f"{round_name}/{stem}", decode_name(unquote(stem)), started))
    return spark.createDataFrame(rows, "source string, gateway_id string, scrape_time_ms long")


@dataclass
class DatasetSamples:
    """The samples of a dataset, whatever its format, and how many the dataset holds."""

    frame: DataFrame
    text_count: Observation | None = None
    parquet: DataFrame | None = None

    def total(self) -> int:
        """Sample lines plus Parquet rows of the whole dataset (after ``frame`` ran once).

        Parquet rows are counted from the files' row-group metadata: no column is read.
        """
        total = 0 if self.text_count is None else int(self.text_count.get["samples"])
        return total + (0 if self.parquet is None else self.parquet.count())


def read_samples(
    spark: SparkSession,
    root: str,
    *,
    metrics: Sequence[str] | None = None,
    parse_labels: bool = True,
    since: datetime | None = None,
    until: datetime | None = None,
) -> DatasetSamples:
    """The samples of the dataset (``ts``, ``gateway_id``, ``metric``, ``labels``, ``value``).

    Text scrapes and Parquet samples alike, their union when a dataset has both.
    ``metrics``: keep only these (text lines of other metrics are dropped before
    splitting; in Parquet the filter reaches the reader, which skips row groups).
    ``since``/``until``: samples at or after / before these times (UTC); in Parquet the
    days outside are not even listed (``date`` partitions).
    ``parse_labels=False``: ``label_text`` as written instead of the ``labels`` map (see
    ``transforms.key_samples``).
    """
    parts: list[DataFrame] = []
    text_count = None
    lines = _text_lines(spark, root)
    if lines is not None:
        text_count = Observation("text samples")
        lines = lines.observe(
            text_count, F.count_if(ex.is_sample_line(F.col("line"))).alias("samples")
        )
        if metrics is not None:
            lines = lines.where(ex.starts_with_metric(F.col("line"), metrics))
        split = ex.split_samples(lines)
        if metrics is not None:
            split = split.where(F.col("metric").isin(*metrics))
        scrapes = scrapes_frame(spark, lines.inputFiles())
        parts.append(ex.attach_scrapes(split, scrapes))
    parquet = read_parquet(spark, root)
    if parquet is not None:
        wanted = parquet if metrics is None else parquet.where(F.col("metric").isin(*metrics))
        # The day bounds prune partitions; the time bounds below then cut within a day.
        if since is not None:
            wanted = wanted.where(F.col(DATE_PARTITION) >= since.strftime("%Y-%m-%d"))
        if until is not None:
            wanted = wanted.where(F.col(DATE_PARTITION) <= until.strftime("%Y-%m-%d"))
        parts.append(wanted.select(*tx.SAMPLE_COLUMNS))
    if not parts:
        raise DatasetError(
            f"no samples under {root} (neither {SAMPLES}/ nor {SCRAPES}/); "
            "run 'featurectl collect --out DIR' first"
        )
    frame = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    if since is not None:
        frame = frame.where(F.col("ts") >= F.lit(since))
    if until is not None:
        frame = frame.where(F.col("ts") < F.lit(until))
    if parse_labels:
        frame = ex.parse_labels(frame)
    return DatasetSamples(frame, text_count, parquet)


def _text_lines(spark: SparkSession, root: str) -> DataFrame | None:
    if not _may_hold(root, SCRAPES, f"*/*{PROM_SUFFIX}"):
        return None
    try:
        return read_lines(spark, root)
    except DatasetError:
        return None


def read_parquet(spark: SparkSession, root: str) -> DataFrame | None:
    """The Parquet samples of the dataset (with the ``date`` partition), None if none.

    The schema is given, not inferred: Spark then opens no footer to plan the read, and
    ``date`` stays a string.
    """
    if not _may_hold(root, SAMPLES, f"*/*{PARQUET_SUFFIX}"):
        return None
    try:
        return spark.read.schema(SPARK_SCHEMA).parquet(f"{root}/{SAMPLES}")
    except Exception:  # AnalysisException: PATH_NOT_FOUND on a remote file system
        return None


def _may_hold(root: str, directory: str, pattern: str) -> bool:
    """Whether local ``root/directory`` has files matching ``pattern``; True for a URI
    (Spark finds out: a missing directory fails the read, and that part is left out)."""
    if "://" in root and not root.startswith("file:"):
        return True
    local = Path(root.removeprefix("file://"))
    return next((local / directory).glob(pattern), None) is not None


def read_latest_state(spark: SparkSession, root: str) -> StateSnapshot | None:
    """The newest ``state/<stamp>.json`` of the dataset (stamps sort by time), or None."""
    try:
        files = (_files(spark, "*.json").text(f"{root}/{STATE}", wholetext=True)).select(
            F.col("_metadata.file_name").alias("name"), "value"
        )
    except Exception:  # no state directory: the dataset came from --gateway/Prometheus only
        return None
    newest = files.orderBy(F.col("name").desc()).limit(1).collect()
    if not newest:
        return None
    return StateSnapshot.from_dict(json.loads(newest[0]["value"]))


def read_clients(dataset_dir: str) -> list[dict]:
    """The client identities the dataset's gateways saw (``DIR/clients/``, written by
    ``featurectl collect`` from each gateway's /clients), as plain rows: per gateway
    and identity its newest record, fields as ``featurectl.plan.clients_dataset.ROW_FIELDS``
    (``first_seen``, ``last_seen``, ``scraped_at`` in epoch seconds). [] when the dataset
    has none (collected from Prometheus, or from gateways without /clients). Read
    without Spark (a few rows per identity): a local directory or ``file://`` only."""
    return read_client_rows(dataset_dir)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


__all__ = [
    "DatasetError",
    "DatasetSamples",
    "dataset_uri",
    "read_clients",
    "read_latest_state",
    "read_lines",
    "read_parquet",
    "read_samples",
    "scrapes_frame",
]
