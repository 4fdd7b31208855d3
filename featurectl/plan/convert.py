"""``featurectl convert``: a text dataset (``scrapes/``) into the Parquet one (``samples/``).

A one-off for datasets collected before Parquet. It runs the planner's own text parser
(``transforms.split_samples``) with Spark, so a converted dataset plans exactly as the
text did, and writes ``DIR/samples/date=<day>/`` files whose rows are range-partitioned
and sorted by metric, gateway and time (see ``columnar``). The state snapshots are copied. The
text dataset is left as it is; ``featurectl plan`` reads either.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.commands import add_command

from .arguments import add_verbose_argument
from .columnar import DATE_PARTITION, SAMPLES, SORT_KEY
from .layout import PROM_SUFFIX, SCRAPES, STATE
from .session import spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXIT_OK = 0
EXIT_USAGE = 2
# Row groups of a converted file: small enough that min/max statistics skip the
# metrics and gateways a reader does not want (rows are sorted by them).
ROW_GROUP_BYTES = 8 * 1024 * 1024
# A converted file holds at most this many samples (Spark starts another).
MAX_ROWS_PER_FILE = 20_000_000

EPILOG = """\
examples:
  # once: the text dataset of an older collect, as Parquet beside it
  featurectl convert --metrics metrics/ --out metrics-parquet/

  # then plan from the Parquet copy (the text one still plans too)
  featurectl plan --metrics metrics-parquet/ --target group.version=1

exit codes: 0 converted, 2 usage error (no text dataset, --out already holds samples)
"""


def convert(spark: SparkSession, source: str, out: str) -> int:
    """Write the samples of text dataset ``source`` as Parquet under ``out``; rows written."""
    from pyspark.sql import functions as F

    from . import readers

    # Milliseconds, as collect writes them (Spark's default is the legacy INT96).
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MILLIS")
    samples = readers.read_samples(spark, source, parse_labels=False)
    frame = samples.frame.withColumn(DATE_PARTITION, F.date_format("ts", "yyyy-MM-dd"))
    # Range partitions: each task writes the files of a contiguous run of metrics and
    # gateways, so a file's (and a row group's) range stays narrow.
    (
        frame.repartitionByRange(DATE_PARTITION, *SORT_KEY[:2])
        .sortWithinPartitions(DATE_PARTITION, *SORT_KEY)
        .write.partitionBy(DATE_PARTITION)
        .option("compression", "zstd")
        .option("parquet.block.size", ROW_GROUP_BYTES)
        .option("maxRecordsPerFile", MAX_ROWS_PER_FILE)
        .mode("errorifexists")
        .parquet(f"{out}/{SAMPLES}")
    )
    return samples.total()


def add_convert_subcommand(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = add_command(
        subparsers,
        "convert",
        help_text="turn a text dataset of 'featurectl collect' into the Parquet one (one-off)",
        description=(
            "Read the Prometheus text scrapes of a dataset (DIR/scrapes/, what 'featurectl "
            "collect' wrote before Parquet) with Spark and write them as the Parquet dataset "
            "(OUT/samples/date=<day>/), copying the state snapshots. The text dataset is "
            "left as it is."
        ),
        epilog=EPILOG,
    )
    parser.add_argument("--metrics", required=True, metavar="DIR", help="the text dataset")
    parser.add_argument("--out", required=True, metavar="DIR", help="where to write Parquet")
    parser.add_argument("--master", metavar="URL", help="Spark master [local[*]]")
    add_verbose_argument(parser)
    parser.set_defaults(handler=run_convert, parser=parser)
    return parser


def run_convert(args: argparse.Namespace) -> int:
    from .readers import dataset_uri

    source, out = Path(args.metrics), Path(args.out)
    if next((source / SCRAPES).glob(f"*/*{PROM_SUFFIX}"), None) is None:
        print(
            f"featurectl convert: {source} holds no text scrapes ({SCRAPES}/<round>/"
            f"*{PROM_SUFFIX}); nothing to convert",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if (out / SAMPLES).exists():
        print(
            f"featurectl convert: {out / SAMPLES} exists; give an --out without samples",
            file=sys.stderr,
        )
        return EXIT_USAGE
    started = time.perf_counter()
    spark = spark_session(args.master, verbose=args.verbose)
    try:
        rows = convert(spark, dataset_uri(str(source)), dataset_uri(str(out)))
    finally:
        spark.stop()
    if (source / STATE).is_dir():
        shutil.copytree(source / STATE, out / STATE, dirs_exist_ok=True)
    print(
        f"featurectl convert: {rows:,} samples into {out / SAMPLES} "
        f"({time.perf_counter() - started:.1f} s); next: featurectl plan --metrics {out}"
    )
    return EXIT_OK


__all__ = ["add_convert_subcommand", "convert", "run_convert"]
