"""The columnar (Parquet) half of the dataset: one row per sample, no parsing at plan time.

::

    DIR/samples/date=YYYY-MM-DD/part-<first>-<written>-<pid>-<n>.parquet

Columns: ``gateway_id`` (string), ``ts`` (timestamp, ms, UTC), ``metric``, ``label_text``
(the labels as the exporter wrote them, between the braces) and ``value`` (double).
``date`` is a Hive partition (the UTC day of ``ts``): a time range reads only its days.
Rows in a file are sorted by metric, gateway and time, in row groups of
``ROW_GROUP_ROWS``, so Parquet's min/max statistics let a reader skip the row groups of
metrics and gateways it does not want: the planner reads 7 of a gateway's ~20 metric
families, and most samples are latency buckets and response counters it never opens.
The gateway is deliberately not a directory level: one directory per gateway
would multiply the file count by the fleet size (200 gateways flushing every 5 minutes
make 57,600 files a day), and the planner's cost would grow with files, not samples.

Writers: ``featurectl collect`` (``SampleSink``, pyarrow, no Spark: scrapes are parsed
here once, when written), ``featurectl convert`` (Spark, from a text dataset) and
``synth``. ``featurectl plan`` reads text and Parquet alike (``readers``).
"""

from __future__ import annotations

import itertools
import os
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .layout import ScrapeMeta, round_time_ms, stamp

SAMPLES = "samples"
PARQUET_SUFFIX = ".parquet"
DATE_PARTITION = "date"
# The file schema, as Spark reads it (``date`` comes from the directory name).
SPARK_SCHEMA = (
    "gateway_id string, ts timestamp, metric string, label_text string, value double, "
    f"{DATE_PARTITION} string"
)
# The order of rows in a file (see above).
SORT_KEY = ("metric", "gateway_id", "ts")
# Small enough that one row group holds a few gateways of a flush (the statistics then
# prune by gateway), big enough that per-group overhead stays negligible.
ROW_GROUP_ROWS = 65_536
# A collect run writes its buffer when it holds this many samples, whatever --flush says,
# so memory stays bounded (~100 bytes a buffered sample).
MAX_BUFFERED_SAMPLES = 2_000_000

_files = itertools.count()


def arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("gateway_id", pa.string()),
            ("ts", pa.timestamp("ms", tz="UTC")),
            ("metric", pa.string()),
            ("label_text", pa.string()),
            ("value", pa.float64()),
        ]
    )


def exposition_samples(text: str) -> Iterator[tuple[str, str, float, int | None]]:
    """``(metric, label_text, value, timestamp_ms or None)`` of each sample line of ``text``.

    The same reading as the planner's Spark parser (``transforms.split_samples``), so a
    scrape gives the same samples in either format: comments and blank lines skipped,
    a line whose value does not parse dropped, ``label_text`` kept as written.
    """
    for raw in text.splitlines():
        line = raw.strip(" ")
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            # A value or timestamp never holds "}": after the last one come only those.
            head, brace, tail = line.rpartition("}")
            if not brace:
                continue
            metric, _, label_text = head.partition("{")
            tokens = tail.replace("\t", " ").split()
        else:
            metric, label_text = line.split(" ", 1)[0], ""
            tokens = line.replace("\t", " ").split()[1:]
        if not metric or not tokens:
            continue
        try:
            value = float(tokens[0])
        except ValueError:
            continue
        ts: int | None = None
        if len(tokens) > 1:
            try:
                ts = int(tokens[1])
            except ValueError:
                ts = None
        yield metric, label_text, value, ts


class SampleSink:
    """Buffers parsed scrapes and writes them as Parquet files, one per UTC day touched.

    ``round(name)`` gives the per-round writer ``featurectl collect`` uses (the same
    shape as ``layout.RoundWriter``); ``flush()`` writes what is buffered.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._columns: dict[str, list[Any]] = defaultdict(list)
        self.buffered = 0
        self.written: list[Path] = []

    def round(self, round_name: str) -> _SinkRound:
        started = round_time_ms(round_name)
        if started is None:
            raise ValueError(f"{round_name!r} is not a round name (see layout.stamp)")
        return _SinkRound(self, round_name, started)

    def add(self, gateway_id: str, text: str, default_ms: int) -> int:
        """Buffer the samples of one scrape; lines without a timestamp get ``default_ms``."""
        columns = self._columns
        count = 0
        for metric, label_text, value, ts in exposition_samples(text):
            columns["gateway_id"].append(gateway_id)
            columns["ts"].append(default_ms if ts is None else ts)
            columns["metric"].append(metric)
            columns["label_text"].append(label_text)
            columns["value"].append(value)
            count += 1
        self.buffered += count
        if self.buffered >= MAX_BUFFERED_SAMPLES:
            self.flush()
        return count

    def flush(self) -> list[Path]:
        """Write the buffer (one file per day, rows sorted by metric, gateway and time)."""
        if not self.buffered:
            return []
        import pyarrow as pa
        import pyarrow.compute as pc

        table = pa.table(dict(self._columns), schema=arrow_schema())
        self._columns = defaultdict(list)
        self.buffered = 0
        days = pc.strftime(table["ts"], format="%Y-%m-%d")
        table = table.append_column("day", days)
        paths = []
        for day in sorted(set(days.to_pylist())):
            part = table.filter(pc.equal(table["day"], day)).drop_columns(["day"])
            paths.append(write_part(self.root, day, part))
        self.written.extend(paths)
        return paths


class _SinkRound:
    """One round of a ``SampleSink``: one scrape per gateway, samples at the round's time."""

    def __init__(self, sink: SampleSink, round_name: str, started_ms: int) -> None:
        self.sink = sink
        self.round_name = round_name
        self.started_ms = started_ms
        self._taken: set[str] = set()

    def write(self, meta: ScrapeMeta, text: str) -> Path:
        if meta.gateway_id in self._taken:
            # Two scrapes of one gateway in a round would count its traffic twice.
            raise ValueError(f"gateway {meta.gateway_id!r} already has a scrape in this round")
        self._taken.add(meta.gateway_id)
        self.sink.add(meta.gateway_id, text, self.started_ms)
        return self.sink.root / SAMPLES


def write_part(root: Path, day: str, table: Any) -> Path:
    """Write ``table`` (rows of one day) sorted by ``SORT_KEY``, atomically."""
    import pyarrow.parquet as pq

    table = table.sort_by([(column, "ascending") for column in SORT_KEY])
    directory = Path(root) / SAMPLES / f"{DATE_PARTITION}={day}"
    directory.mkdir(parents=True, exist_ok=True)
    first = datetime.fromtimestamp(table["ts"][0].value / 1000, UTC)
    name = (
        f"part-{stamp(first)}-{stamp(datetime.now(UTC))}-{os.getpid()}-{next(_files):04d}"
        f"{PARQUET_SUFFIX}"
    )
    path = directory / name
    # A dot name while writing: Spark and pyarrow skip hidden files, a reader never sees
    # half a file.
    tmp = directory / f".{name}.tmp"
    pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS, compression="zstd")
    tmp.replace(path)
    return path


def has_parquet(root: Path) -> bool:
    """Whether a local dataset directory holds any Parquet samples."""
    return next((Path(root) / SAMPLES).glob(f"*/*{PARQUET_SUFFIX}"), None) is not None


__all__ = [
    "DATE_PARTITION",
    "PARQUET_SUFFIX",
    "SAMPLES",
    "SORT_KEY",
    "SPARK_SCHEMA",
    "SampleSink",
    "arrow_schema",
    "exposition_samples",
    "has_parquet",
    "write_part",
]
