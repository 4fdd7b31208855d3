"""Benchmark ``featurectl plan`` on a synthetic dataset (10 million samples by default).

Generates the dataset once (``featurectl.plan.synth``, Parquet as ``featurectl collect``
writes it, or ``--format text``; reused while its spec matches), then runs the planner
as a user would, in its own process with ``--master local[2]``, and prints samples,
wall seconds, CPU seconds and the planner's own stage timings. Targets (issue 14): 10M
samples < 30 s, 100M < 4 min on local[2].

    .venv/bin/python bench/plan_bench.py                          # 10M samples, Parquet
    .venv/bin/python bench/plan_bench.py --samples 1000000        # a quick look
    .venv/bin/python bench/plan_bench.py --samples 100000000 --data /big/disk/plan-100m
    .venv/bin/python bench/plan_bench.py --format text            # the old text dataset
    .venv/bin/python bench/plan_bench.py --json plan-bench.json
    .venv/bin/python bench/plan_bench.py --release 4.0             # and --release 4.0

"seconds" is the wall time of the whole command (JVM start-up included). "CPU s" is
every process of the run, sampled from /proc (``plan_cluster_bench.run_plan``): on a
shared machine it is the steadier figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from plan_cluster_bench import run_plan  # beside this file: sys.path[0]

from featurectl.plan import synth
from tests.harness.spark import spark_env

# Wall-second targets by dataset size (issue 14), on local[2].
TARGETS_S = {10_000_000: 30.0, 100_000_000: 240.0}
# Larger Parquet datasets are this many samples generated, repeated in time.
TILE_SAMPLES = 10_000_000


def tiled(data: Path, spec: synth.SynthSpec, copies: int) -> synth.SynthSummary:
    """``copies`` of the ``spec`` fleet one after the other in time, as one Parquet dataset.

    The same 24 gateways and series over a window ``copies`` times as long: what
    ``spec_for_samples`` would generate for the larger size (more scrapes, same fleet),
    except that the counters start over at each copy (the planner reads it as a
    restart of every gateway, and does the same work per sample).
    """
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from featurectl.plan.columnar import SAMPLES, write_part

    manifest = data / synth.MANIFEST
    if manifest.exists():
        doc = json.loads(manifest.read_text())
        # Compared as JSON reads it back (tuples become lists).
        wanted = json.loads(json.dumps({"copies": copies, "spec": dataclasses.asdict(spec)}))
        if doc.get("tiled") == wanted:
            return synth.SynthSummary(spec, doc["samples"], doc["files"], doc["bytes"], 0.0)
    # Beside the dataset, named as the default dataset of that size: the 10M bench shares it.
    base = data.with_name(f"kafka-gateway-plan-bench-parquet-{TILE_SAMPLES}")
    summary = synth.existing(base, spec)
    if summary is None:
        if base.exists():
            shutil.rmtree(base)
        print(f"generating {spec.scrapes} scrapes of the fleet into {base} ...", flush=True)
        summary = synth.generate(base, spec)
    if data.exists():
        shutil.rmtree(data)
    table = ds.dataset(base / SAMPLES, format="parquet", partitioning="hive").to_table()
    table = table.drop_columns(["date"])
    window_ms = spec.scrapes * spec.interval_s * 1000
    paths = []
    for copy in range(copies):
        ts = pc.add(table["ts"].cast("int64"), copy * window_ms).cast(table["ts"].type)
        shifted = table.set_column(table.schema.get_field_index("ts"), "ts", ts)
        days = pc.strftime(shifted["ts"], format="%Y-%m-%d")
        for day in sorted(set(days.unique().to_pylist())):
            paths.append(write_part(data, day, shifted.filter(pc.equal(days, day))))
    shutil.copytree(base / "state", data / "state")
    files, size = len(paths), sum(p.stat().st_size for p in paths)
    samples = summary.samples * copies
    manifest.write_text(
        json.dumps(
            {
                "tiled": {"copies": copies, "spec": dataclasses.asdict(spec)},
                "samples": samples,
                "files": files,
                "bytes": size,
            }
        )
        + "\n"
    )
    return synth.SynthSummary(spec, samples, files, size, 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time 'featurectl plan' on a synthetic dataset.",
        epilog="exit codes: 0 measured (whatever the figures), 2 the planner failed",
    )
    parser.add_argument(
        "--data",
        type=Path,
        help="dataset directory (generated when missing or of another spec) "
        "[TMPDIR/kafka-gateway-plan-bench-FORMAT-SAMPLES]",
    )
    parser.add_argument("--samples", type=int, default=10_000_000, help="[%(default)s]")
    parser.add_argument("--gateways", type=int, default=24, help="[%(default)s]")
    parser.add_argument("--format", choices=("parquet", "text"), default="parquet")
    parser.add_argument("--master", default="local[2]", help="[%(default)s]")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
    )
    parser.add_argument(
        "--release",
        metavar="VERSION",
        help="also plan the brokers' upgrade to this Kafka release (featurectl plan "
        "--release), to compare with the feature plan alone [no]",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    data = args.data or Path(tempfile.gettempdir()) / (
        f"kafka-gateway-plan-bench-{args.format}-{args.samples}"
    )
    copies = 1
    if args.format == "parquet" and args.samples > TILE_SAMPLES:
        # Beyond TILE_SAMPLES the generator's Python is the bottleneck (~20 s a million):
        # generate TILE_SAMPLES and repeat them in time (see tile()).
        copies = -(-args.samples // TILE_SAMPLES)
    spec = synth.spec_for_samples(args.samples // copies, args.gateways, args.format)
    summary = synth.existing(data, spec) if copies == 1 else tiled(data, spec, copies)
    if summary is None:
        print(f"generating {args.samples:,} samples ({args.format}) into {data} ...", flush=True)
        if data.exists() and not (data / synth.MANIFEST).exists() and any(data.iterdir()):
            print(f"{data} is not empty and not a synthetic dataset; pick --data", file=sys.stderr)
            return 2
        if data.exists():
            shutil.rmtree(data)
        summary = synth.generate(data, spec)
        print(f"  generated in {summary.seconds:.1f} s")
    print(
        f"dataset: {summary.samples:,} samples, {summary.files:,} files, "
        f"{summary.bytes / 1e6:,.0f} MB ({args.format}), "
        f"{spec.gateways} gateways x {spec.scrapes * copies} scrapes"
    )

    workdir = Path(tempfile.mkdtemp(prefix="plan-bench-"))
    conf = [item for pair in args.conf for item in ("--conf", pair)]
    if args.release:
        conf += ["--release", args.release]
    try:
        run = run_plan(data, workdir / "plan", args.master, spark_env(workdir), [], *conf)
    except SystemExit as failed:
        print(failed, file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    run.pop("plan")
    samples, seconds = run["samples"], run["seconds"]
    target = TARGETS_S.get(args.samples)
    verdict = "" if target is None else f"; target < {target:.0f} s: "
    verdict += "" if target is None else ("met" if seconds < target else "MISSED")
    print(
        f"samples {samples:,}  seconds {seconds:.1f}  samples/s {samples / seconds:,.0f}  "
        f"CPU s {run['cpu_s']} (machine busy {run['machine_busy_s']} s)  "
        f"({args.master}{verdict})"
    )
    print(
        "planner stages (s): " + ", ".join(f"{k} {v}" for k, v in run["planner_timings_s"].items())
    )
    print("CPU s by process: " + ", ".join(f"{k} {v}" for k, v in run["cpu_by_role_s"].items()))
    if args.json:
        figures = {
            **run,
            "format": args.format,
            "files": summary.files,
            "bytes": summary.bytes,
            "target_s": target,
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
