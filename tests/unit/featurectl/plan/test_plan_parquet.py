"""The Parquet dataset: what collect's writer and the converter store is what the text
dataset of the same scrapes gives the planner, sample for sample.

The text dataset and the Parquet one come from the same synthetic fleet (``synth``
writes through collect's own sinks); the converter runs on the text one.
"""

from __future__ import annotations

import dataclasses
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from featurectl.plan import readers, synth
from featurectl.plan import transforms as tx
from featurectl.plan.columnar import SAMPLES, SORT_KEY, SampleSink
from featurectl.plan.compute import compute_plan
from featurectl.plan.convert import convert
from featurectl.plan.layout import ScrapeMeta
from featurectl.plan.model import PlanInputs
from gateway.features.catalogue import load_catalogue
from tests.unit.featurectl.plan.test_plan_transforms import spark

__all__ = ["spark"]  # the session fixture, shared with the transforms tests

SPEC = synth.SynthSpec(gateways=3, scrapes=6, old_gateways=1, restart_gateway=1)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    text = tmp_path_factory.mktemp("text")
    parquet = tmp_path_factory.mktemp("parquet")
    synth.generate(text, SPEC)
    synth.generate(parquet, dataclasses.replace(SPEC, format="parquet"))
    return {"text": text, "parquet": parquet}


def samples(spark: SparkSession, root: Path) -> tuple[list[tuple], int]:
    found = readers.read_samples(spark, str(root), parse_labels=False)
    rows = sorted(tuple(r) for r in found.frame.select(*tx.SAMPLE_COLUMNS).collect())
    return rows, found.total()


@pytest.fixture(scope="module")
def text_samples(spark: SparkSession, datasets: dict[str, Path]) -> tuple[list[tuple], int]:
    """The text dataset's samples and count, the reference of every test here (read once)."""
    return samples(spark, datasets["text"])


def test_collects_parquet_holds_the_samples_of_the_text_scrapes(
    spark, datasets, text_samples
) -> None:
    text_rows, text_total = text_samples
    parquet_rows, parquet_total = samples(spark, datasets["parquet"])
    assert parquet_rows == text_rows
    assert parquet_total == text_total == len(text_rows)


def test_the_converter_round_trips_a_text_dataset(spark, datasets, text_samples, tmp_path) -> None:
    out = tmp_path / "converted"
    written = convert(spark, str(datasets["text"]), str(out))
    text_rows, _ = text_samples
    assert written == len(text_rows)
    # Read back as Parquet only: no scrapes/ beside it.
    assert not (out / "scrapes").exists()
    assert samples(spark, out) == (text_rows, len(text_rows))
    # Files as the layout says: per day, rows sorted by metric, gateway, time; ms timestamps.
    (day,) = {p.parent.name for p in (out / SAMPLES).glob("*/*.parquet")}
    assert day == "date=2025-01-06"
    for path in (out / SAMPLES).glob("*/*.parquet"):
        table = pq.read_table(path)
        assert str(table.schema.field("ts").type) == "timestamp[ms, tz=UTC]"
        keys = list(zip(*(table[c].to_pylist() for c in SORT_KEY), strict=True))
        assert keys == sorted(keys)


def test_a_dataset_with_both_formats_reads_their_union(
    spark, datasets, text_samples, tmp_path
) -> None:
    both = tmp_path / "both"
    shutil.copytree(datasets["text"], both)
    shutil.copytree(datasets["parquet"] / SAMPLES, both / SAMPLES)
    text_rows, _ = text_samples
    rows, total = samples(spark, both)
    assert rows == sorted(text_rows + text_rows) and total == 2 * len(text_rows)


def test_a_time_range_reads_only_its_days(spark, tmp_path) -> None:
    sink = SampleSink(tmp_path)
    for day in ("20250106", "20250107"):
        writer = sink.round(f"{day}T235945.000Z")
        writer.write(ScrapeMeta("gw-a", None, 0), "kafka_gateway_info 1\nm 2\n")
    sink.flush()
    since = datetime(2025, 1, 7, tzinfo=UTC)
    found = readers.read_samples(spark, str(tmp_path), metrics=["m"], since=since)
    # Spark hands timestamps back as naive local times: compare instants.
    assert [(r.ts.timestamp(), r.value) for r in found.frame.collect()] == [
        (datetime(2025, 1, 7, 23, 59, 45, tzinfo=UTC).timestamp(), 2.0)
    ]
    # The day before is pruned by its directory, not read and filtered.
    plan = found.frame._jdf.queryExecution().executedPlan().toString()
    assert "PartitionFilters: [isnotnull(date" in plan and "2025-01-07" in plan
    until = datetime(2025, 1, 7, tzinfo=UTC)
    found = readers.read_samples(spark, str(tmp_path), metrics=["m"], until=until)
    assert [r.ts.timestamp() < until.timestamp() for r in found.frame.collect()] == [True]


def test_the_planner_reads_only_samples_from_since_until_until(spark, tmp_path) -> None:
    # Six scrapes 15 s apart across midnight: 23:59:30 and :45, then 00:00:00 to :45.
    spec = dataclasses.replace(SPEC, format="parquet", start="2025-01-06T23:59:30+00:00")
    synth.generate(tmp_path, spec)
    inputs = PlanInputs(metrics=str(tmp_path), catalogue=load_catalogue(None), targets={})
    whole = compute_plan(spark, inputs).dataset
    # A partial day: the day before is not read, and the scrapes of the day outside the
    # range are cut too (at or after --since, before --until).
    since = datetime(2025, 1, 7, 0, 0, 15, tzinfo=UTC)
    until = datetime(2025, 1, 7, 0, 0, 45, tzinfo=UTC)
    part = compute_plan(spark, dataclasses.replace(inputs, since=since, until=until)).dataset
    assert whole["scrapes"] == spec.gateways * spec.scrapes
    assert (part["start_ms"], part["end_ms"]) == (since.timestamp() * 1000, 1736208030000)
    assert part["scrapes"] == 2 * spec.gateways
    assert part["planner_samples"] < whole["planner_samples"] / 2
