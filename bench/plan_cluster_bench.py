"""``featurectl plan`` on a standalone Spark cluster against local[N], on the same data.

Starts a master and ``--workers`` workers (``--cores`` each) from pyspark's jars with the
test harness (``tests/harness/spark.py``, loopback only), then runs the planner once with
``--master local[W*C]`` and once with ``--master spark://...``, each in its own process
as a user would, and prints wall seconds and the planner's own stage timings::

    .venv/bin/python bench/plan_cluster_bench.py --samples 1000000
    .venv/bin/python bench/plan_cluster_bench.py --samples 1000000 --json cluster.json

One run each; on a shared machine wall seconds are noisy (say so when quoting them).
CPU seconds are steadier: every process of a run (the driver, its JVM, the executors the
workers start, the master and workers themselves) is sampled from ``/proc`` while it
runs, and "machine busy" shows how much of the box the run did not use itself.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from featurectl.plan import synth
from tests.harness.spark import SparkMaster, SparkWorker, spark_env

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ("--target", "transaction.version=2", "--target", "group.version=0")


TICK = os.sysconf("SC_CLK_TCK")
# What a process is, by a word of its command line (first match wins).
ROLES = (
    ("CoarseGrainedExecutorBackend", "executors"),
    ("deploy.worker.Worker", "workers"),
    ("deploy.master.Master", "master"),
    ("SparkSubmit", "driver JVM"),
    ("pyspark.daemon", "python workers"),
    ("featurectl", "driver python"),
)


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, utime + stime seconds) of ``pid``, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def _machine_busy_s() -> float:
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICK


class TreeCpu:
    """CPU seconds of process trees, sampled while they run (executors come and go).

    A process that lives shorter than one interval is missed; the planner's are JVMs
    that live for the whole run.
    """

    def __init__(self, roots: list[int], interval_s: float = 0.25) -> None:
        self.roots = set(roots)
        self.seen: dict[int, float] = {}
        self._base: dict[int, float] = {}
        self.roles: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.interval_s = interval_s

    def _sample(self) -> dict[int, float]:
        stats = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
                stats[int(entry.name)] = stat
        tree, grew = set(self.roots), True
        while grew:
            more = {pid for pid, (ppid, _) in stats.items() if ppid in tree} - tree
            tree |= more
            grew = bool(more)
        return {pid: stats[pid][1] for pid in tree if pid in stats}

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.seen.update(self._sample())
            for pid in self.seen:
                self._name(pid)

    def __enter__(self) -> TreeCpu:
        # Long-running roots (master, workers) count only what they spend from now on.
        self._base = self._sample()
        self.busy_start = _machine_busy_s()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.seen.update(self._sample())
        self.busy_s = _machine_busy_s() - self.busy_start

    @property
    def cpu_s(self) -> float:
        return sum(self.by_role().values())

    def by_role(self) -> dict[str, float]:
        """CPU seconds per kind of process (executor, driver JVM, ...)."""
        roles: dict[str, float] = {}
        for pid, cpu in self.seen.items():
            role = self.roles.get(pid, "other")
            roles[role] = round(roles.get(role, 0.0) + cpu - self._base.get(pid, 0.0), 1)
        return roles

    def _name(self, pid: int) -> None:
        if pid in self.roles:
            return
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return
        self.roles[pid] = next((role for key, role in ROLES if key in argv), "other")


def run_plan(
    data: Path, out: Path, master: str, env: dict[str, str], daemons: list[int], *conf: str
) -> dict[str, Any]:
    command = [sys.executable, "-m", "featurectl.plan.job", "--metrics", str(data)]
    command += ["--master", master, "--out", str(out), *TARGETS, *conf]
    started = time.perf_counter()
    with (
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
        ) as proc,
        TreeCpu([proc.pid, *daemons]) as cpu,
    ):
        _, stderr = proc.communicate()
    done = subprocess.CompletedProcess(command, proc.returncode, "", stderr)
    seconds = time.perf_counter() - started
    # 1: plan written, some target unsafe (the synthetic fleet is built that way).
    if done.returncode not in (0, 1):
        raise SystemExit(f"the planner failed on {master}:\n{done.stderr[-4000:]}")
    plan = json.loads((out / "plan.json").read_text())
    return {
        "master": master,
        "seconds": round(seconds, 1),
        "cpu_s": round(cpu.cpu_s, 1),
        "machine_busy_s": round(cpu.busy_s, 1),
        "cpu_by_role_s": cpu.by_role(),
        "samples": plan["dataset"]["samples"],
        "planner_timings_s": plan["timings_s"],
        "plan": {k: v for k, v in plan.items() if k not in ("generated_at", "timings_s")},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        type=Path,
        help="dataset directory (generated when missing or of another spec) "
        "[TMPDIR/kafka-gateway-plan-cluster-bench-FORMAT-SAMPLES]",
    )
    parser.add_argument("--samples", type=int, default=1_000_000, help="[%(default)s]")
    parser.add_argument("--gateways", type=int, default=24, help="[%(default)s]")
    parser.add_argument("--format", choices=("parquet", "text"), default="parquet")
    parser.add_argument("--workers", type=int, default=2, help="[%(default)s]")
    parser.add_argument("--cores", type=int, default=1, help="per worker [%(default)s]")
    parser.add_argument("--memory", default="2g", help="per worker and executor [%(default)s]")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for both runs (repeatable), to try a change",
    )
    parser.add_argument("--skip-local", action="store_true", help="run the cluster only")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    if args.data is None:
        args.data = Path(tempfile.gettempdir()) / (
            f"kafka-gateway-plan-cluster-bench-{args.format}-{args.samples}"
        )
    spec = synth.spec_for_samples(args.samples, args.gateways, args.format)
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
    conf = [item for pair in args.conf for item in ("--conf", pair)]
    if not args.skip_local:
        figures["local"] = run_plan(
            args.data, workdir / "plan-local", f"local[{cores}]", env, [], *conf
        )
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
                [p for p in (master.pid, *(w.pid for w in workers)) if p is not None],
                "--conf",
                f"spark.executor.memory={args.memory}",
                *conf,
            )
        finally:
            for worker in workers:
                worker.stop()
    runs = [figures[k] for k in ("local", "cluster") if k in figures]
    plans = [run.pop("plan") for run in runs]
    same = all(plan == plans[0] for plan in plans)
    figures["same_plan"] = same
    for run in runs:
        stages = ", ".join(f"{k} {v}" for k, v in run["planner_timings_s"].items())
        print(
            f"{run['master']:>24}: {run['samples']:,} samples in {run['seconds']} s, "
            f"{run['cpu_s']} CPU s (machine busy {run['machine_busy_s']} s; {stages})"
        )
        print(" " * 26 + "CPU s: " + ", ".join(f"{k} {v}" for k, v in run["cpu_by_role_s"].items()))
    print(f"plans equal: {same}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
