"""Benchmark ``featurectl plan`` on a synthetic dataset of about 10 million samples.

Generates the dataset once (``featurectl.plan.synth``; reused while its spec matches),
then runs the planner as a user would, in its own process with ``--master local[2]``,
and prints rows, seconds and rows/s. The target: under 2 minutes for >= 10M samples.

    .venv/bin/python bench/plan_bench.py                      # ~10M samples, ~1.3 GB
    .venv/bin/python bench/plan_bench.py --samples 1000000    # a quick look
    .venv/bin/python bench/plan_bench.py --json plan-bench.json

"seconds" is the wall time of the whole command (JVM start-up included); the Spark
stages as the planner timed them are printed as well.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from featurectl.plan import synth

TARGET_S = 120.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time 'featurectl plan' on a synthetic dataset.",
        epilog="exit codes: 0 measured (whatever the figures), 2 the planner failed",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(tempfile.gettempdir()) / "kafka-gateway-plan-bench",
        help="dataset directory (generated when missing or of another spec) [%(default)s]",
    )
    parser.add_argument("--samples", type=int, default=10_000_000, help="[%(default)s]")
    parser.add_argument("--gateways", type=int, default=24, help="[%(default)s]")
    parser.add_argument("--master", default="local[2]", help="[%(default)s]")
    parser.add_argument("--out", type=Path, help="plan output [DATA-plan]")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    spec = synth.spec_for_samples(args.samples, args.gateways)
    summary = synth.existing(args.data, spec)
    if summary is None:
        print(f"generating {args.samples:,} samples into {args.data} ...", flush=True)
        if (
            args.data.exists()
            and not (args.data / synth.MANIFEST).exists()
            and any(args.data.iterdir())
        ):
            print(
                f"{args.data} is not empty and not a synthetic dataset; pick --data",
                file=sys.stderr,
            )
            return 2
        _clear(args.data)
        summary = synth.generate(args.data, spec)
        print(f"  generated in {summary.seconds:.1f} s")
    print(
        f"dataset: {summary.samples:,} samples, {summary.files:,} files, "
        f"{summary.bytes / 1e6:,.0f} MB, {spec.gateways} gateways x {spec.scrapes} scrapes"
    )

    out = args.out or args.data.with_name(args.data.name + "-plan")
    command = [
        sys.executable,
        "-m",
        "featurectl.plan.job",
        "--metrics",
        str(args.data),
        "--master",
        args.master,
        "--out",
        str(out),
        "--target",
        "transaction.version=2",
        "--target",
        "group.version=0",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    # 1 means "plan written, some target unsafe": the synthetic fleet is built that way.
    if done.returncode not in (0, 1):
        print(done.stdout, done.stderr[-4000:], sep="\n", file=sys.stderr)
        return 2
    plan = json.loads((out / "plan.json").read_text())
    rows = plan["dataset"]["samples"]
    figures = {
        "rows": rows,
        "seconds": round(seconds, 2),
        "rows_per_s": round(rows / seconds),
        "master": args.master,
        "files": summary.files,
        "bytes": summary.bytes,
        "planner_timings_s": plan["timings_s"],
        "target_s": TARGET_S,
    }
    print(
        f"rows {rows:,}  seconds {seconds:.1f}  rows/s {rows / seconds:,.0f}  "
        f"({args.master}; target < {TARGET_S:.0f} s: {'met' if seconds < TARGET_S else 'MISSED'})"
    )
    print("planner stages (s): " + ", ".join(f"{k} {v}" for k, v in plan["timings_s"].items()))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def _clear(directory: Path) -> None:
    import shutil

    if directory.exists():
        shutil.rmtree(directory)


if __name__ == "__main__":
    sys.exit(main())
