"""``featurectl plan`` on a standalone Spark cluster against local[N], on the same data.

Starts a master and ``--workers`` workers (``--cores`` each) from pyspark's jars with the
test harness (``tests/harness/spark.py``, loopback only), then runs the planner once with
``--master local[W*C]`` and once with ``--master spark://...``, each in its own process
as a user would, and prints wall seconds and the planner's own stage timings::

    .venv/bin/python bench/plan_cluster_bench.py --samples 1000000
    .venv/bin/python bench/plan_cluster_bench.py --samples 1000000 --json cluster.json

One run each; on a shared machine the figures are noisy (say so when quoting them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from featurectl.plan import synth
from tests.harness.spark import SparkMaster, SparkWorker, spark_env

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("--target", "transaction.version=2", "--target", "group.version=0")


def run_plan(data: Path, out: Path, master: str, env: dict[str, str], *conf: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "featurectl.plan.job", "--metrics", str(data)]
    command += ["--master", master, "--out", str(out), *TARGETS, *conf]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - started
    # 1: plan written, some target unsafe (the synthetic fleet is built that way).
    if done.returncode not in (0, 1):
        raise SystemExit(f"the planner failed on {master}:\n{done.stderr[-4000:]}")
    plan = json.loads((out / "plan.json").read_text())
    return {
        "master": master,
        "seconds": round(seconds, 1),
        "samples": plan["dataset"]["samples"],
        "planner_timings_s": plan["timings_s"],
        "plan": {k: v for k, v in plan.items() if k not in ("generated_at", "timings_s")},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(tempfile.gettempdir()) / "kafka-gateway-plan-cluster-bench",
        help="dataset directory (generated when missing or of another spec) [%(default)s]",
    )
    parser.add_argument("--samples", type=int, default=1_000_000, help="[%(default)s]")
    parser.add_argument("--gateways", type=int, default=24, help="[%(default)s]")
    parser.add_argument("--workers", type=int, default=2, help="[%(default)s]")
    parser.add_argument("--cores", type=int, default=1, help="per worker [%(default)s]")
    parser.add_argument("--memory", default="2g", help="per worker and executor [%(default)s]")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    spec = synth.spec_for_samples(args.samples, args.gateways)
    if synth.existing(args.data, spec) is None:
        if args.data.exists() and any(args.data.iterdir()):
            if not (args.data / synth.MANIFEST).exists():
                print(f"{args.data} is not a synthetic dataset; pick --data", file=sys.stderr)
                return 2
            import shutil

            shutil.rmtree(args.data)
        print(f"generating {args.samples:,} samples into {args.data} ...", flush=True)
        synth.generate(args.data, spec)

    workdir = Path(tempfile.mkdtemp(prefix="plan-cluster-bench-"))
    env = spark_env(workdir)
    cores = args.workers * args.cores
    figures: dict[str, Any] = {"workers": args.workers, "cores_per_worker": args.cores}
    figures["local"] = run_plan(args.data, workdir / "plan-local", f"local[{cores}]", env)
    with SparkMaster(workdir) as master:
        workers = [
            SparkWorker(workdir, master, cores=args.cores, memory=args.memory, name=f"worker-{i}")
            for i in range(args.workers)
        ]
        try:
            for worker in workers:
                worker.start()
            figures["cluster"] = run_plan(
                args.data,
                workdir / "plan-cluster",
                master.url,
                env,
                "--conf",
                f"spark.executor.memory={args.memory}",
            )
        finally:
            for worker in workers:
                worker.stop()
    same = figures["local"].pop("plan") == figures["cluster"].pop("plan")
    figures["same_plan"] = same
    for run in (figures["local"], figures["cluster"]):
        stages = ", ".join(f"{k} {v}" for k, v in run["planner_timings_s"].items())
        print(f"{run['master']:>24}: {run['samples']:,} samples in {run['seconds']} s ({stages})")
    print(f"plans equal: {same}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
