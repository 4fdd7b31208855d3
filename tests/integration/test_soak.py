"""The soak (bench/soak.py) for two minutes, every fault at least once, as a CI test.

The soak starts its own ZooKeeper, Apache Kafka 4.4 and a two-worker gateway with short
connection limits, and runs an idempotent producer, a consumer group, short-lived
kafka-python and aiokafka clients, attackers and faults (SIGHUP, a worker SIGKILL, a
ZooKeeper and a broker restart) at once; see bench/README.md, "Soak". This test reads
its JSON report. The fast tests below check that the report's verdict does fail a run
that lost a record, logged a traceback or grew, so the slow test can fail too.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SOAK_PY = Path(__file__).resolve().parents[2] / "bench" / "soak.py"
DURATION_S = 120
#: Per process, MB/min over the second minute. Two minutes cannot tell a slow leak from
#: warm-up: a worker still grows while its allocator arenas and caches fill (up to
#: 7.5 MB/min measured here in the second minute of a run; over 10- and 30-minute runs
#: the workers level off at 63-67 MB and the second half's slopes are 0.0-0.3 MB/min).
#: So the bound is generous, and still meaningful: the large-frame attacker leaves
#: 768 KiB of a frame in the gateway about twice a second, and a gateway that kept the
#: closed connections (the bug issue 34 found, put back with a sitecustomize that made
#: ``ClientConnection._let_go`` keep them) measured +30 and +31 MB/min in its workers.
RSS_SLOPE_BOUND = 12.0
#: Idle fds may differ this much, start to end: the ZooKeeper session's socket and the
#: restarted worker's pipes are reopened, not added.
FD_MARGIN = 8
FAULTS = {"reload", "worker_kill", "zookeeper_restart", "broker_restart"}


def soak_module() -> ModuleType:
    """bench/soak.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("soak", SOAK_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_two_minute_soak(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    argv = [sys.executable, str(SOAK_PY), "--duration", str(DURATION_S), "--broker", "kafka",
            "--fault-cycle", str(DURATION_S), "--reload-every", "30", "--sample-every", "2",
            "--drain-timeout", "20", "--max-rss-slope", str(RSS_SLOPE_BOUND),
            "--out", str(out), "--workdir", str(tmp_path / "parts")]  # fmt: skip
    started = time.monotonic()
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = run.communicate(timeout=DURATION_S + 120)
    except subprocess.TimeoutExpired:
        run.terminate()  # the soak stops its parts on SIGTERM
        stdout, stderr = run.communicate(timeout=60)
        pytest.fail(f"the soak did not finish in time\n{stdout}\n{stderr[-3000:]}")
    took = time.monotonic() - started
    assert out.exists(), f"no report (exit {run.returncode})\n{stdout}\n{stderr[-3000:]}"
    report: dict[str, Any] = json.loads(out.read_text())
    table = f"{stdout}\n(the soak took {took:.0f} s; logs in {tmp_path / 'parts'})"

    # Every fault happened, and none failed to happen.
    faults = report["faults"]
    assert {f["fault"] for f in faults} == FAULTS, table
    assert all(f["error"] is None for f in faults), (faults, table)
    counters = report["gateway_counters"]
    assert counters["kafka_gateway_worker_restarts_total"] == 1, (counters, table)
    assert counters["kafka_gateway_config_reloads_total{result=failed}"] == 0, table

    # No acked record lost; the load really ran (at least 80 % of the rate was acked).
    records = report["records"]
    assert records["lost"] == 0, (records["lost_examples"], table)
    assert records["acked"] >= 0.8 * report["rate_per_s"] * DURATION_S, table
    assert records["duplicates_in_log"] == 0, table  # the idempotent producer's promise
    assert records["producer_fatal"] == [], table

    assert report["tracebacks"]["count"] == 0, report["tracebacks"]["examples"]

    # Liveness: the supervisor answers /healthz and /readyz itself, and one worker keeps
    # serving while the other is killed and restarted. So /healthz (liveness: restart the
    # gateway?) is 200 at every probe: no fault of a worker, the broker or ZooKeeper is a
    # reason to restart the gateway. /readyz is answered at every probe, 200 but while
    # the broker restarts (and one check interval after): readiness may report an
    # upstream it cannot reach, that is its job.
    health, ready = report["liveness"]["/healthz"], report["liveness"]["/readyz"]
    for live in (health, ready):
        assert live["probes"] >= DURATION_S / 2 * 0.8, live
        assert live["unanswered"] == 0, (live["not_ok"], table)
    assert health["ok_200"] == health["probes"], (health["not_ok"], table)
    assert all(n["during"] == "broker_restart" for n in ready["not_ok"]), (ready, table)

    fds = report["fds"]
    assert fds["end"] <= fds["start"] + FD_MARGIN, (fds, table)
    # Once every client is gone, the gateway counts no connection and holds no byte.
    for name, gauge in report["gauges"].items():
        assert gauge["max"], (name, gauge)  # the gauge was read, and moved
        assert gauge["idle_end"] == 0, (name, gauge, table)

    for name, proc in report["processes"].items():
        slope = proc["rss_slope_mb_per_min"]
        assert slope is None or slope <= RSS_SLOPE_BOUND, (name, slope, table)
    # The processes that lived through the second minute were judged.
    assert sum(p["rss_slope_mb_per_min"] is not None for p in report["processes"].values()) >= 4

    # Every attacker was cut by its limit, in time, and by nothing else outside a fault
    # (while the broker is down the gateway closes what it cannot connect upstream; the
    # killed worker's connections close with it); the per-IP flood is refused at accept.
    for name, attack in report["attackers"].items():
        assert attack["opened"] > 0, (name, attack)
        assert attack["late"] == 0 and attack["never"] == 0, (name, attack, table)
        early = attack["closed_early"]["otherwise"]
        assert early > 0 if name == "per_ip_flood" else early == 0, (name, attack, table)
    for reason in ("closed_total{reason=idle}", "closed_total{reason=first_request_timeout}",
                   "refused_total{reason=max_connections_per_ip}"):  # fmt: skip
        assert counters[f"kafka_gateway_connections_{reason}"] > 0, (reason, counters)
    assert counters["kafka_gateway_rejected_requests_total{reason=oversize_frame}"] > 0, counters

    assert report["verdict"] == [] and run.returncode == 0, table


# -- the verdict can fail -------------------------------------------------------------


def passing_report(soak: ModuleType, ledger: Any) -> dict[str, Any]:
    return {
        "records": soak.records(ledger),
        "tracebacks": soak.tracebacks('{"event": "gateway.listening"}\n'),
        "processes": {},
    }


def test_a_lost_record_fails_the_soak() -> None:
    soak = soak_module()
    ledger = soak.Ledger()
    for seq in range(10):
        ledger.ack(seq)
    for offset, seq in enumerate([0, 1, 2, 3, 4, 5, 6, 8, 9, 9]):  # 7 lost, 9 twice
        ledger.read(offset % 3, offset, seq)
    ledger.read(0, 0, 0)  # offset 0 of partition 0 read again: redelivered, not lost
    report = passing_report(soak, ledger)
    assert ledger.missing() == 1  # what the soak's drain waits for
    assert report["records"]["lost"] == 1
    assert report["records"]["lost_examples"] == [7]
    assert report["records"]["duplicates_in_log"] == 1
    assert report["records"]["redelivered"] == 1
    assert soak.verdict(report, max_slope=1.0) == ["1 acked records never consumed"]
    ledger.read(1, 10, 7)
    assert ledger.missing() == 0
    assert soak.verdict(passing_report(soak, ledger), max_slope=1.0) == []


def test_a_traceback_in_the_log_fails_the_soak() -> None:
    soak = soak_module()
    log = (
        '{"event": "gateway.listening"}\n'
        '{"event": "x", "exception": "Traceback (most recent call last):\\n  File ..."}\n'
    )
    report = passing_report(soak, soak.Ledger()) | {"tracebacks": soak.tracebacks(log)}
    assert soak.verdict(report, max_slope=1.0) == ["1 tracebacks in the gateway log"]


def test_rss_growth_in_the_second_half_fails_the_soak() -> None:
    soak = soak_module()
    samples = []
    for i in range(61):  # 120 s, a sample every 2 s
        t = 2.0 * i
        grows = 100 * 1024 + int(t / 60 * 3 * 1024)  # 3 MB/min
        flat = 50 * 1024 + (int(t * 512) if t < 30 else 15 * 1024)  # warm-up only
        samples.append(
            soak.Sample(
                t,
                {1: ("supervisor", flat, 20), 2: ("worker", grows, 40)},
                (200, 0.001, "ok"),
                (200, 0.001, "ready"),
            )
        )
    processes = soak.analyse_processes(samples, duration_s=120)
    assert processes["supervisor 1"]["rss_slope_mb_per_min"] == 0
    assert processes["worker 2"]["rss_slope_mb_per_min"] == pytest.approx(3, abs=0.05)
    report = passing_report(soak, soak.Ledger()) | {"processes": processes}
    assert soak.verdict(report, max_slope=2.0) == ["worker 2: RSS slope 3.00 MB/min > 2.0 MB/min"]
    assert soak.verdict(report, max_slope=4.0) == []
