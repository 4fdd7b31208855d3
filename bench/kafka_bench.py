#!/usr/bin/env python3
"""What the gateway costs in front of Apache Kafka: direct vs gateway vs haproxy (issue 30).

One run starts an Apache Kafka 4.4 broker (KRaft, full-JIT JVM) on loopback, the gateway
(``python -m gateway``, sidecar, 1 worker; ``gateway-auto``: its default worker count) and
haproxy (``mode tcp``) in front of it, and then, for every rate and path, produces 1 KB
records at that fixed rate with Kafka's own ``ProducerPerformance`` (acks=all) while a
librdkafka consumer reads the same topic alongside through the same path.

Per path and rate: publish latency (send to ack, as the producer tool measures it) and
end-to-end latency (CreateTime to the consumer's receipt), avg/p50/p99; records/s sent and
consumed; deltas and ratios against direct in the same run; the proxy's CPU (utime + stime
of its process tree from /proc) per MB produced, gateway beside haproxy.

The broker has one client listener per way in, because a broker advertises one address
per listener: ``PLAINTEXT`` advertises itself (the direct path, and the gateway's
upstream: the gateway rewrites whatever it sees) and ``HAPROXY`` advertises haproxy's
port, so a client that came in through haproxy is sent back through haproxy (haproxy
does not rewrite Metadata).

``python bench/kafka_bench.py --help`` lists the options; bench/README.md explains it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import (
    BUSY_MACHINE_PCT,
    LOOPBACK,
    REPO_ROOT,
    BenchError,
    CpuProbe,
    Service,
    Stack,
    cpu_set_text,
    gateway_argv,
    haproxy_config,
    haproxy_exe,
    layout_cpus,
    log_tail,
    one_line,
    stop_process,
)
from gateway.server.apache_kafka import KRAFT_VERSION, KafkaNode, classpath, java
from gateway.server.embedded import free_port

PATHS = ("direct", "gateway", "gateway-auto", "haproxy")
MiB = 1 << 20
#: What ``kafka-server-start.sh`` gives a broker (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS).
BROKER_JVM = (
    "-Xms1g", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
)  # fmt: skip
#: ``kafka-producer-perf-test.sh``'s heap, with the same collector.
PRODUCER_JVM = ("-Xmx512m", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20")
BROKER_READY_S = 120.0
ANCHOR = (
    "anchor: Kroxylicious' benchmark (Kafka 3.9, 1 KB records, 50k msg/s) reports "
    "+0.2 ms average publish latency through the proxy, throughput unchanged"
)
# "N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency, P50 ms 50th,
#  P95 ms 95th, P99 ms 99th, P999 ms 99.9th." once for the run, then once more, "N steady
#  state records sent, ...", for the records after --warmup-records.
_TOTAL = re.compile(
    r"(\d+) (?:steady state )?records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), "
    r"([\d.]+) ms avg latency, ([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, "
    r"(\d+) ms 99th, (\d+) ms 99.9th"
)
_TOTAL_KEYS = ("sent", "rps", "mbps", "pub_avg_ms", "pub_max_ms", "pub_p50_ms", "pub_p95_ms",
               "pub_p99_ms", "pub_p999_ms")  # fmt: skip


# --------------------------------------------------------------------------- consumer


def consume_main(bootstrap: str, topic: str, count: int, skip: int, timeout_s: float) -> int:
    """The consumer alongside: read ``count`` records of partition 0, print one JSON line.

    Runs in its own process (``kafka_bench.py consume ...``) so that its CPU is the
    client's, not the bench's. It prints ``ready`` once it has a connection (a ListOffsets
    round trip), so the producer starts against a consumer that is already fetching.
    End-to-end latency per record = receipt time - the record's CreateTime (the producer
    stamps it at send(), in ms; the ~0.5 ms truncation is the same on every path); the
    first ``skip`` offsets (the producer's warm-up) are left out.
    """
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kafka-bench-{os.getpid()}",
                         "enable.auto.commit": False})  # fmt: skip
    partition = TopicPartition(topic, 0, OFFSET_BEGINNING)
    consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    consumer.assign([partition])
    print("ready", flush=True)
    latencies: list[float] = []
    received, first, last = 0, 0.0, 0.0
    deadline = time.monotonic() + timeout_s
    try:
        while received < count and time.monotonic() < deadline:
            batch = consumer.consume(10_000, 0)  # what is queued, without waiting
            if not batch:
                one = consumer.poll(0.05)
                batch = [one] if one is not None else []
            now_ms = time.time() * 1000
            for msg in batch:
                if msg.error():
                    raise BenchError(f"consumer: {msg.error()}")
                if msg.offset() >= skip:
                    latencies.append(now_ms - msg.timestamp()[1])
            if batch:
                last = time.monotonic()
                first = first or last
                received += len(batch)
    finally:
        consumer.close()
    latencies.sort()
    out: dict[str, Any] = {"received": received, "seconds": last - first}
    if latencies:
        n = len(latencies)
        out |= {"e2e_avg_ms": statistics.fmean(latencies), "e2e_p50_ms": latencies[n // 2],
                "e2e_p99_ms": latencies[min(n - 1, int(n * 0.99))]}  # fmt: skip
    print(json.dumps(out), flush=True)
    return 0


# --------------------------------------------------------------------------- processes


def broker_node(workdir: Path, haproxy_port: int) -> tuple[KafkaNode, int]:
    """A KRaft node with a second client listener, ``HAPROXY``, advertised as haproxy.

    Returns the node and the HAPROXY listener's own port (haproxy's upstream).
    """
    node = KafkaNode(workdir, port=free_port(), internal_port=free_port(),
                     controller_port=free_port(), jvm_options=BROKER_JVM)  # fmt: skip
    via_haproxy = free_port()
    base = node.broker_properties()
    added = {
        "listeners": f"HAPROXY://{LOOPBACK}:{via_haproxy}",
        "advertised.listeners": f"HAPROXY://{LOOPBACK}:{haproxy_port}",
        "listener.security.protocol.map": "HAPROXY:PLAINTEXT",
    }
    node.properties = {key: f"{base[key]},{value}" for key, value in added.items()}
    return node, via_haproxy


def taskset(cpus: set[int] | None) -> list[str]:
    """An argv prefix that starts a process on ``cpus`` (nothing: anywhere)."""
    return ["taskset", "-c", cpu_set_text(cpus)] if cpus else []


def start_broker(stack: Stack, node: KafkaNode, cpus: set[int] | None) -> Service:
    """Start the broker and wait until it creates a topic (it has registered)."""
    node.prepare()
    log = stack.workdir / "broker.log"
    with log.open("wb") as out:
        argv = [*taskset(cpus), *node.command()]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    stack.callback(stop_process, proc)
    service = Service("broker", node.port, proc, log)
    deadline = time.monotonic() + BROKER_READY_S
    while True:
        if proc.poll() is not None:
            raise BenchError(f"broker exited with {proc.returncode}:\n{log_tail(log)}")
        try:
            admin(node.bootstrap, create="kafka-bench-ready")
            return service
        except Exception as exc:  # not registered yet: retried until the deadline
            if time.monotonic() > deadline:
                raise BenchError(f"broker not ready after {BROKER_READY_S:.0f}s: {exc}") from exc
            time.sleep(0.5)


def admin(bootstrap: str, *, create: str = "", delete: str = "") -> None:
    """Create a one-partition topic, or drop a measured one (best effort: a long run's
    topics would fill the disk). log_level 0: no librdkafka lines while the broker starts."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    client = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    if create:
        for future in client.create_topics([NewTopic(create, 1, 1)], request_timeout=10).values():
            future.result(timeout=15)
    with contextlib.suppress(Exception):
        for future in client.delete_topics([delete], request_timeout=10).values() if delete else ():
            future.result(timeout=15)


def check_paths(paths: dict[str, tuple[int, Service | None]]) -> None:
    """Every path's Metadata names the path itself: a client never leaves the path it took."""
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    for path, (port, _) in paths.items():
        brokers = AdminClient({"bootstrap.servers": f"{LOOPBACK}:{port}"}).list_topics(timeout=15)
        seen = {(b.host, b.port) for b in brokers.brokers.values()}
        if seen != {(LOOPBACK, port)}:
            raise BenchError(f"{path}: Metadata says {seen}, not {LOOPBACK}:{port}")


def start_proxies(
    stack: Stack, args: argparse.Namespace, node: KafkaNode, haproxy: tuple[int, int]
) -> tuple[dict[str, tuple[int, Service | None]], dict[str, str]]:
    """Each path's (bootstrap port, proxy service); paths that did not start go to notes."""
    cpus = args.client_cpus
    paths: dict[str, tuple[int, Service | None]] = {}
    notes: dict[str, str] = {}
    for path in args.paths:
        try:
            if path == "direct":
                paths[path] = (node.port, None)
            elif path in ("gateway", "gateway-auto"):
                port = free_port()
                workers = ["--workers", "1"] if path == "gateway" else []
                extra = [*workers, "--log-level", "warning", *args.gateway_arg]
                argv = [*taskset(cpus), *gateway_argv(port, node.port, extra)]
                paths[path] = (port, stack.start(path, argv, port, cwd=REPO_ROOT))
            elif path == "haproxy":
                exe = haproxy_exe()
                if exe is None:
                    raise BenchError("haproxy is not installed (apt-get install haproxy)")
                port, upstream = haproxy
                cfg = stack.workdir / "haproxy.cfg"
                cfg.write_text(haproxy_config(port, upstream, nbthread=args.haproxy_threads))
                argv = [*taskset(cpus), exe, "-f", str(cfg), "-db"]
                paths[path] = (port, stack.start(path, argv, port))
        except (BenchError, OSError) as exc:
            notes[path] = f"did not start: {exc}"
    return paths, notes


# --------------------------------------------------------------------------- one measurement


def producer_argv(args: argparse.Namespace, bootstrap: str, topic: str, rate: int) -> list[str]:
    records = rate * args.seconds
    return [
        *taskset(args.client_cpus), java(), *PRODUCER_JVM,
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath(KRAFT_VERSION),
        "org.apache.kafka.tools.ProducerPerformance", "--bootstrap-server", bootstrap,
        "--topic", topic, "--num-records", str(records), "--throughput", str(rate),
        "--record-size", str(args.record_size), "--warmup-records", str(rate * args.warmup),
        "--command-property", "acks=all", *args.producer_prop,
    ]  # fmt: skip


def parse_producer(text: str) -> dict[str, float]:
    """The producer's last summary: the steady state's (the whole run's without warm-up)."""
    found = _TOTAL.findall(text)
    if not found:
        raise BenchError(f"no summary in the producer's output:\n{text[-2000:]}")
    return dict(zip(_TOTAL_KEYS, map(float, found[-1]), strict=True))


def measure(
    args: argparse.Namespace,
    broker: Service,
    bootstrap: str,
    proxy: Service | None,
    topic: str,
    rate: int,
) -> dict[str, Any]:
    """One fixed-rate produce run with the consumer alongside, and the CPU it cost."""
    admin(f"{LOOPBACK}:{broker.port}", create=topic)
    records = rate * args.seconds
    consumer = subprocess.Popen(
        [*taskset(args.client_cpus), sys.executable, __file__, "consume", bootstrap, topic,
         str(records), str(rate * args.warmup), str(args.seconds * 3 + 60)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        ready = consumer.stdout.readline() if consumer.stdout else ""
        if ready.strip() != "ready":
            raise BenchError(f"consumer did not start: {ready}{consumer.communicate()[0]}")
        probe = CpuProbe([broker.proc.pid], proxy.pids() if proxy else [])
        consumer_start = CpuProbe.cpu_seconds([consumer.pid])  # its start-up, left out below
        before, children_before, t0 = probe.sample(), _children_cpu(), time.time()
        done = subprocess.run(
            producer_argv(args, bootstrap, topic, rate),
            capture_output=True, text=True, timeout=args.seconds * 3 + 60, check=False,
        )  # fmt: skip
        out, _ = consumer.communicate(timeout=60)
        elapsed = time.time() - t0
        after = probe.sample()
        client_s = _children_cpu() - children_before - consumer_start
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    (args.workdir / f"{topic}.producer.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise BenchError(f"producer exited {done.returncode}:\n{done.stdout[-1500:]}")
    result: dict[str, Any] = parse_producer(done.stdout)
    result |= json.loads(out.strip().splitlines()[-1])
    own_s, broker_s, proxy_s, busy_s = (a - b for a, b in zip(after, before, strict=True))
    client_s += own_s  # the bench's own share (the admin client): negligible, but counted
    mib = records * args.record_size / MiB
    result |= {
        "consumed_rps": result["received"] / result["seconds"] if result["seconds"] else 0.0,
        "elapsed_s": elapsed,
        "broker_cpu_pct": 100 * broker_s / elapsed,
        "proxy_cpu_pct": 100 * proxy_s / elapsed,
        "client_cpu_pct": 100 * client_s / elapsed,
        "other_cpu_pct": max(0.0, 100 * (busy_s - broker_s - proxy_s - client_s) / elapsed),
        "proxy_cpu_ms_per_mib": 1000 * proxy_s / mib,
    }
    if result["received"] < records:
        result["note"] = f"consumer got {result['received']} of {records} records"
    return result


def _children_cpu() -> float:
    """CPU seconds of this process's reaped children: the producer JVM and the consumer."""
    return os.times().children_user + os.times().children_system


# --------------------------------------------------------------------------- report

COLUMNS: tuple[tuple[str, str, str], ...] = (  # key, label, format
    ("rps", "sent rec/s", "{:.0f}"),
    ("consumed_rps", "consumed rec/s", "{:.0f}"),
    ("pub_avg_ms", "publish avg ms", "{:.2f}"),
    ("pub_p50_ms", "publish p50 ms", "{:.0f}"),
    ("pub_p99_ms", "publish p99 ms", "{:.0f}"),
    ("e2e_avg_ms", "e2e avg ms", "{:.2f}"),
    ("e2e_p50_ms", "e2e p50 ms", "{:.1f}"),
    ("e2e_p99_ms", "e2e p99 ms", "{:.1f}"),
    ("proxy_cpu_pct", "proxy CPU %", "{:.1f}"),
    ("proxy_cpu_ms_per_mib", "proxy CPU ms/MB", "{:.2f}"),
    ("broker_cpu_pct", "broker CPU %", "{:.1f}"),
    ("client_cpu_pct", "clients CPU %", "{:.1f}"),
    ("other_cpu_pct", "other CPU %", "{:.1f}"),
)
DELTAS = {f"{k}_{q}_ms": f"+{label} {q} ms" for k, label in (("pub", "publish"), ("e2e", "e2e"))
          for q in ("avg", "p50", "p99")}  # fmt: skip


def median_of(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """Per metric, the median over the rounds that measured it."""
    keys = {k for r in rounds for k, v in r.items() if isinstance(v, int | float)}
    return {k: statistics.median(r[k] for r in rounds if k in r) for k in keys}


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [header, *rows]
    ]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def report(
    results: dict[int, dict[str, list[dict[str, Any]]]], notes: dict[str, str]
) -> dict[int, dict[str, dict[str, float]]]:
    """Print per rate the figures, the deltas and ratios against direct; return the medians."""
    summary: dict[int, dict[str, dict[str, float]]] = {}
    for rate, by_path in results.items():
        med = {path: median_of(rounds) for path, rounds in by_path.items() if rounds}
        summary[rate] = med
        print(f"\n== {rate} msg/s of 1 KB ==")
        rows = [
            [path] + [fmt.format(m[k]) if k in m else "-" for k, _, fmt in COLUMNS]
            for path, m in med.items()
        ]
        print(_table(["path"] + [label for _, label, _ in COLUMNS], rows))
        direct = med.get("direct")
        if direct is None:
            continue
        print("\nagainst direct (same run):")
        header = ["path", "sent x direct", "consumed x direct", *DELTAS.values()]
        rows = []
        for path, m in med.items():
            if path == "direct":
                continue
            row = [path]
            for key in ("rps", "consumed_rps"):
                row.append(f"{m[key] / direct[key]:.3f}" if direct.get(key) and key in m else "-")
            row += [f"{m[k] - direct[k]:+.2f}" if k in m and k in direct else "-" for k in DELTAS]
            rows.append(row)
        print(_table(header, rows))
        gw, hap = med.get("gateway"), med.get("haproxy")
        if gw and hap and hap.get("proxy_cpu_ms_per_mib"):
            ratio = gw["proxy_cpu_ms_per_mib"] / hap["proxy_cpu_ms_per_mib"]
            print(f"gateway CPU per MB: {ratio:.2f}x haproxy's")
        if max(m.get("other_cpu_pct", 0) for m in med.values()) > BUSY_MACHINE_PCT:
            print(f"warning: other processes used over {BUSY_MACHINE_PCT:.0f}% of a core")
    for path, note in notes.items():
        print(f"{path}: {note}")
    print(f"\n{ANCHOR}")
    return summary


# --------------------------------------------------------------------------- run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--seconds", type=int, default=30, help="per path and rate [30]")
    add("--warmup", type=int, default=5, help="first seconds of each left out [5]")
    add("--rates", type=int, nargs="+", default=[10_000, 50_000], help="msg/s [10000 50000]")
    add("--paths", nargs="+", choices=PATHS, default=["direct", "gateway", "haproxy"])
    add("--rounds", type=int, default=1, help="repeats, path order rotated; medians shown [1]")
    add("--record-size", type=int, default=1024, help="bytes [1024]")
    add("--broker-warmup", type=int, default=15, help="s direct at the top rate first [15]")
    add("--cpu-layout", choices=("shared", "split"), default="shared",
        help="split: the broker alone on the first CPU, everything else on the others")  # fmt: skip
    add("--haproxy-threads", type=int, help="haproxy nbthread [its default: one per CPU]")
    add("--producer-prop", action="append", default=[], help="KEY=VALUE, repeatable")
    add("--gateway-arg", action="append", default=[], help="for the gateway, repeatable")
    add("--json", type=Path, help="also write the figures here")
    add("--keep", action="store_true", help="keep the work folder (logs)")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    started = datetime.datetime.now(datetime.UTC)
    workdir = args.workdir = Path(tempfile.mkdtemp(prefix="kafka-bench-"))
    placed = layout_cpus(args.cpu_layout, os.sched_getaffinity(0))
    if placed is None:
        raise SystemExit("--cpu-layout split needs at least 2 CPUs")
    broker_cpus, args.client_cpus = placed if args.cpu_layout == "split" else (None, None)
    if args.client_cpus:
        os.sched_setaffinity(0, args.client_cpus)
    results: dict[int, dict[str, list[dict[str, Any]]]] = {
        rate: {path: [] for path in args.paths} for rate in args.rates
    }
    haproxy_port = free_port()
    node, via_haproxy = broker_node(workdir / "broker", haproxy_port)
    with Stack(workdir) as stack:
        broker = start_broker(stack, node, broker_cpus)
        paths, notes = start_proxies(stack, args, node, (haproxy_port, via_haproxy))
        check_paths(paths)
        ports = ", ".join(f"{p} :{port}" for p, (port, _) in paths.items())
        print(f"Apache Kafka {KRAFT_VERSION}; {ports}; layout {args.cpu_layout}; logs in {workdir}")
        if args.broker_warmup:
            top = max(args.rates)
            warm = argparse.Namespace(**{**vars(args), "seconds": args.broker_warmup, "warmup": 0})
            measure(warm, broker, node.bootstrap, None, "kafka-bench-warmup", top)
            admin(node.bootstrap, delete="kafka-bench-warmup")
            print(f"broker warmed up: {args.broker_warmup}s at {top} msg/s direct", flush=True)
        order = list(paths)
        for rnd in range(args.rounds):
            for rate in args.rates:
                for path in order[rnd % len(order) :] + order[: rnd % len(order)]:
                    port, proxy = paths[path]
                    topic = f"kafka-bench-{path}-{rate}-{rnd}"
                    try:
                        r = measure(args, broker, f"{LOOPBACK}:{port}", proxy, topic, rate)
                    except (BenchError, subprocess.TimeoutExpired, ValueError) as exc:
                        notes[f"{path} @ {rate}"] = one_line(str(exc))
                        print(f"{path} @ {rate}: failed: {one_line(str(exc))}", flush=True)
                        continue
                    finally:
                        admin(node.bootstrap, delete=topic)
                    results[rate][path].append(r)
                    shown = ("rps", "pub_avg_ms", "pub_p99_ms", "e2e_avg_ms", "proxy_cpu_pct")
                    line = ", ".join(f"{k} {r[k]:.2f}" for k in shown if k in r)
                    print(f"round {rnd + 1} {path} @ {rate}: {line}", flush=True)
    summary = report(results, notes)
    if args.json:
        doc = {"started": started.isoformat(timespec="seconds"), "argv": sys.argv[1:],
               "cpus": os.cpu_count(), "kafka": KRAFT_VERSION, "medians": summary,
               "rounds": results, "notes": notes}  # fmt: skip
        args.json.write_text(json.dumps(doc, indent=1))
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["consume"]:
        bootstrap, topic, count, skip, timeout = argv[1:6]
        return consume_main(bootstrap, topic, int(count), int(skip), float(timeout))
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
