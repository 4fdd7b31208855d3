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

"seconds" is the wall time of the whole command (JVM start-up included). "CPU s" is
every process of the run, sampled from /proc (``plan_cluster_bench.run_plan``): on a
shared machine it is the steadier figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.plan_cluster_bench import run_plan
from featurectl.plan import synth
from tests.harness.spark import spark_env

# Wall-second targets by dataset size (issue 14), on local[2].
TARGETS_S = {10_000_000: 30.0, 100_000_000: 240.0}


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
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    data = args.data or Path(tempfile.gettempdir()) / (
        f"kafka-gateway-plan-bench-{args.format}-{args.samples}"
    )
    spec = synth.spec_for_samples(args.samples, args.gateways, args.format)
    summary = synth.existing(data, spec)
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
        f"{spec.gateways} gateways x {spec.scrapes} scrapes"
    )

    workdir = Path(tempfile.mkdtemp(prefix="plan-bench-"))
    conf = [item for pair in args.conf for item in ("--conf", pair)]
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
