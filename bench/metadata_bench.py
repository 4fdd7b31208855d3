"""Metadata through the gateway against haproxy and the direct path (issue 19).

Upstream: ``bench/responder.py`` (canned answers, several processes), so that the
broker is never the bottleneck. Paths: direct, gateway, haproxy, started with
``bench.bench``'s helpers. For each Metadata size it reports:

* rate: Metadata v1 responses/s with 1 connection (10k partitions) or 4 (100k+) pulling
  back to back, and the proxy's CPU per response (utime+stime from /proc);
* concurrent: DescribeGroups v0 round trips on one more connection while 2 others pull
  Metadata back to back: p50/p99;
* pipelined (first size only): forwarded DescribeGroups v0, 4 connections with 16
  requests in flight each: requests/s and the proxy's CPU per request (the forwarding
  path's own cost, with an upstream that is never the bottleneck); ``seq``: the same
  with one connection and one request at a time (round trips/s, CPU per round trip);
* rss64: 64 connections each pulling the Metadata twice, all at once: the proxy's peak
  RSS (VmHWM) afterwards;
* storm: 500 clients connecting at once, each ApiVersions + Metadata: time until the
  last is served and peak RSS;
* the gateway's event-loop lag (kafka_gateway_event_loop_lag_seconds, and of it the
  time the loop was running callbacks, ..._busy_seconds) p99, read from its histogram
  buckets, while clients pull Metadata and over the whole run.

``--proxy-cpus 1 --client-cpus 0`` gives the proxies a CPU of their own (the client
threads and the responder on the other), so that lag is the loop's, not the box's.

Targets printed as ratios. Keep runs short on a shared machine (--seconds).
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

# bench/ first: "bench" is bench/bench.py here, not the folder; the repo root for gateway.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import responder
from prometheus_client.parser import text_string_to_metric_families

from bench import (
    LOOPBACK,
    CpuProbe,
    Service,
    Stack,
    _start_paths,
    cpu_list,
    free_port,
    pin,
)

PATHS = ("direct", "gateway", "haproxy")


def _hwm_mb(pids: list[int]) -> float:
    """Peak resident memory (VmHWM) of these processes, summed, in MB."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection((LOOPBACK, port), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _timed_threads(work: Callable[[int], None], conns: int, pids: list[int]) -> tuple[float, float]:
    """Run ``work(i)`` on ``conns`` threads at once: (wall seconds, CPU seconds of pids)."""
    cpu0 = CpuProbe.cpu_seconds(pids)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, CpuProbe.cpu_seconds(pids) - cpu0


def measure_rate(port: int, conns: int, seconds: float, pids: list[int]) -> dict[str, float]:
    """Metadata responses/s over ``conns`` connections, and the CPU of ``pids`` per one."""
    frame = responder.metadata_request(1)
    counts = [0] * conns
    stop = time.perf_counter() + seconds

    def pull(i: int) -> None:
        scratch = bytearray()
        with _connect(port) as sock:
            while time.perf_counter() < stop:
                responder.roundtrip(sock, frame, scratch)
                counts[i] += 1

    elapsed, cpu = _timed_threads(pull, conns, pids)
    total = sum(counts)
    return {"rate": total / elapsed, "cpu_ms": 1000 * cpu / total if total else 0.0}


def measure_concurrent(port: int, pullers: int, seconds: float) -> dict[str, float]:
    """DescribeGroups v0 round trips (ms) while ``pullers`` connections pull Metadata."""
    stop = time.perf_counter() + seconds
    done = threading.Event()

    def pull() -> None:
        scratch = bytearray()
        with _connect(port) as sock:
            while not done.is_set():
                responder.roundtrip(sock, responder.metadata_request(1), scratch)

    threads = [threading.Thread(target=pull) for _ in range(pullers)]
    for t in threads:
        t.start()
    samples: list[float] = []
    scratch = bytearray()
    with _connect(port) as sock:
        frame = responder.describe_groups_request(0)
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            responder.roundtrip(sock, frame, scratch)
            samples.append(1000 * (time.perf_counter() - t0))
    done.set()
    for t in threads:
        t.join()
    q = statistics.quantiles(samples, n=100)
    return {"p50_ms": q[49], "p99_ms": q[98], "max_ms": max(samples), "n": len(samples)}


def measure_pipelined(
    port: int, conns: int, window: int, seconds: float, pids: list[int], name: str = "pipe"
) -> dict[str, float]:
    """Forwarded DescribeGroups v0, ``window`` in flight on each of ``conns`` connections:
    requests/s and the CPU of ``pids`` per request (µs), as ``{name}_rate``/``{name}_us``."""
    batch = b"".join(
        responder.with_correlation_id(responder.describe_groups_request(0), i)
        for i in range(window)
    )
    # Every response has the canned size (a proxy forwards it untouched): one read of
    # the whole window's bytes keeps the Python client's own cost per request low.
    answer = len(responder.canned_response(responder.DESCRIBE_GROUPS, 0)) * window
    counts = [0] * conns
    stop = time.perf_counter() + seconds

    def drive(i: int) -> None:
        view = memoryview(bytearray(answer))
        with _connect(port) as sock:
            while time.perf_counter() < stop:
                sock.sendall(batch)
                responder._recv_into(sock, view)
                counts[i] += window

    elapsed, cpu = _timed_threads(drive, conns, pids)
    total = sum(counts)
    return {f"{name}_rate": total / elapsed, f"{name}_us": 1e6 * cpu / total if total else 0.0}


def drive_many(port: int, clients: int, requests: list[bytes]) -> float:
    """``clients`` connections at once, each sending ``requests`` pipelined and reading
    their responses; return the seconds until the last is served."""
    frames = b"".join(responder.with_correlation_id(r, i) for i, r in enumerate(requests, 1))
    responses = len(requests)
    sel = selectors.DefaultSelector()
    scratch = memoryview(bytearray(1 << 20))
    t0 = time.perf_counter()
    socks = []
    for _ in range(clients):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex((LOOPBACK, port))
        # state: [frames left, bytes left in the current frame, header bytes so far]
        sel.register(sock, selectors.EVENT_WRITE, [responses, 0, b""])
        socks.append(sock)
    left = clients
    deadline = t0 + 120
    while left and time.perf_counter() < deadline:
        for key, events in sel.select(timeout=1):
            sock = cast(socket.socket, key.fileobj)
            state = key.data
            if events & selectors.EVENT_WRITE:
                sock.sendall(frames)  # small: fits the socket buffer
                sel.modify(sock, selectors.EVENT_READ, state)
                continue
            n = sock.recv_into(scratch)
            if not n:
                raise ConnectionError("closed by peer")
            pos = 0
            while pos < n:
                if state[1]:
                    take = min(state[1], n - pos)
                    state[1] -= take
                    pos += take
                    if not state[1]:
                        state[0] -= 1
                    continue
                need = 4 - len(state[2])
                state[2] += bytes(scratch[pos : pos + need])
                pos += min(need, n - pos)
                if len(state[2]) == 4:
                    state[1] = struct.unpack(">i", state[2])[0]
                    state[2] = b""
            if not state[0]:
                # Served: it goes, as a client done with its bootstrap would close it;
                # it also frees a slot under haproxy's maxconn for the next one.
                sel.unregister(sock)
                sock.close()
                left -= 1
    elapsed = time.perf_counter() - t0
    for sock in socks:
        sock.close()
    if left:
        raise TimeoutError(f"{left} clients not served")
    return elapsed


LAG_METRICS = {
    "lag": "kafka_gateway_event_loop_lag_seconds",
    "busy": "kafka_gateway_event_loop_lag_busy_seconds",
}


def lag_buckets(metrics_port: int) -> dict[str, list[tuple[float, float]]]:
    """The gateway's event-loop lag histograms: (le, cumulative count) per metric."""
    text = urllib.request.urlopen(f"http://{LOOPBACK}:{metrics_port}/metrics").read().decode()
    found: dict[str, list[tuple[float, float]]] = {key: [] for key in LAG_METRICS}
    keys = {f"{name}_bucket": key for key, name in LAG_METRICS.items()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in keys:
                found[keys[sample.name]].append((float(sample.labels["le"]), sample.value))
    return found


def lag_p99_ms(
    after: dict[str, list[tuple[float, float]]],
    before: dict[str, list[tuple[float, float]]] | None = None,
) -> dict[str, float | None]:
    """Upper bound of the p99 bucket of each lag histogram, over the probes between
    ``before`` and ``after`` (or all of them)."""
    p99: dict[str, float | None] = {}
    for key, buckets in after.items():
        if before is not None and before.get(key):
            buckets = [(le, n - m) for (le, n), (_, m) in zip(buckets, before[key], strict=True)]
        total = buckets[-1][1] if buckets else 0
        p99[key] = (
            next(1000 * le for le, count in buckets if count >= 0.99 * total) if total else None
        )
    return p99


def run(args: argparse.Namespace) -> int:
    results: dict[str, dict[str, Any]] = {}
    lag: dict[str, float | None] | None = None
    for partitions in args.partitions:
        with (
            responder.start(partitions, args.responder_processes) as upstream,
            Stack(Path(tempfile.mkdtemp(prefix="metadata-bench-"))) as stack,
        ):
            rate, size = responder.ceiling(upstream.port, 1.0)
            print(
                f"\n{partitions:,} partitions ({size:,} bytes): responder ceiling "
                f"{rate:,.0f}/s on one connection",
                flush=True,
            )
            metrics_port = free_port()
            notes: dict[str, str] = {}
            ns = argparse.Namespace(
                broker_bin="",
                paths=list(PATHS),
                gateway_arg=[
                    "--metrics-listen",
                    f"{LOOPBACK}:{metrics_port}",
                    "--workers",
                    str(args.workers),
                ],
            )
            proxy_cpus, client_cpus = set(args.proxy_cpus), set(args.client_cpus)
            if proxy_cpus:
                # The proxies start on their CPUs, so haproxy counts only those for its
                # default thread count (one per CPU), as the gateway's --workers does.
                os.sched_setaffinity(0, proxy_cpus)
            paths = _start_paths(
                stack, ns, cast(Service, SimpleNamespace(port=upstream.port)), notes
            )
            for note in notes.items():
                print("note:", *note)
            if proxy_cpus or client_cpus:
                pin([*upstream.pids(), os.getpid()], client_cpus or set(os.sched_getaffinity(1)))
            conns = 1 if partitions <= 10_000 else 4
            for name, service in paths.items():
                port = service.port if service else upstream.port
                pids = service.pids() if service else upstream.pids()
                row = results.setdefault(f"{name}@{partitions}", {})
                before = lag_buckets(metrics_port) if name == "gateway" else None
                row.update(measure_rate(port, conns, args.seconds, pids))
                if before is not None:
                    # The loop's lag while clients pull Metadata back to back (the
                    # run's p99 below also covers the 64-connection pull and the storm).
                    after = lag_buckets(metrics_port)
                    for key, value in lag_p99_ms(after, before).items():
                        row[f"rate_{key}_p99_ms"] = value
                    # Ten probes a second: over a short run the p99 is nearly the maximum.
                    row["rate_lag_probes"] = after["lag"][-1][1] - before["lag"][-1][1]
                if partitions == args.partitions[0]:
                    row.update(measure_concurrent(port, 2, args.seconds))
                    row.update(measure_pipelined(port, 4, 16, args.seconds, pids))
                    row.update(measure_pipelined(port, 1, 1, args.seconds, pids, "seq"))
                if partitions >= 100_000:
                    frames = responder.metadata_request(1)
                    row["rss64_s"] = drive_many(port, 64, [frames, frames])
                    row["rss64_mb"] = _hwm_mb(pids) if service else None
                    storm = [responder.api_versions_request(0), frames]
                    row["storm_s"] = drive_many(port, args.storm, storm)
                    row["storm_mb"] = _hwm_mb(pids) if service else None
                print(
                    name,
                    {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()},
                    flush=True,
                )
            if paths.get("gateway") is not None:
                lag = lag_p99_ms(lag_buckets(metrics_port))
                print(
                    f"gateway event-loop lag p99 <= {lag['lag']} ms, of it running "
                    f"callbacks <= {lag['busy']} ms (histogram buckets, whole run)"
                )
    print("\ntargets:")
    for partitions in args.partitions:
        gw, ha = results.get(f"gateway@{partitions}"), results.get(f"haproxy@{partitions}")
        if not gw or not ha:
            continue
        print(
            f"  {partitions:,}: gateway/haproxy Metadata rate {gw['rate'] / ha['rate']:.2f} "
            "(target >= 0.8)"
        )
        if "p99_ms" in gw:
            print(
                f"  {partitions:,}: concurrent p99 gateway/haproxy "
                f"{gw['p99_ms'] / ha['p99_ms']:.2f} (target <= 2)"
            )
        if "pipe_us" in gw and ha.get("pipe_us"):
            print(
                f"  pipelined forwarded DescribeGroups: gateway {gw['pipe_us']:.1f} µs CPU per "
                f"request, haproxy {ha['pipe_us']:.1f}: {gw['pipe_us'] / ha['pipe_us']:.2f}x "
                "(target <= 1)"
            )
        if "seq_rate" in gw and ha.get("seq_rate"):
            print(
                f"  sequential forwarded DescribeGroups: gateway/haproxy round trips/s "
                f"{gw['seq_rate'] / ha['seq_rate']:.2f} (target >= 0.9); CPU per round trip "
                f"gateway {gw['seq_us']:.1f} µs, haproxy {ha['seq_us']:.1f} µs"
            )
        if gw.get("rate_lag_p99_ms") is not None:
            print(
                f"  {partitions:,}: event-loop lag p99 while pulling Metadata <= "
                f"{gw['rate_lag_p99_ms']} ms, of it running callbacks <= "
                f"{gw['rate_busy_p99_ms']} ms (target <= 1; {gw['rate_lag_probes']:.0f} probes)"
            )
        if gw.get("rss64_mb"):
            print(
                f"  {partitions:,}: gateway peak RSS with 64 connections {gw['rss64_mb']:.0f} MB "
                "(target <= 100)"
            )
    if lag is not None:
        print(
            f"  event-loop lag p99 over the last size's whole run (storm included) <= "
            f"{lag['lag']} ms, of it running callbacks <= {lag['busy']} ms (target <= 1)"
        )
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--seconds", type=float, default=3.0, help="per rate/latency measurement")
    p.add_argument("--storm", type=int, default=500, help="clients in the reconnect storm")
    p.add_argument("--responder-processes", type=int, default=2)
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="gateway workers (1: one process, like for like with haproxy's one thread)",
    )
    p.add_argument(
        "--proxy-cpus",
        type=cpu_list,
        default=[],
        help="pin the gateway's and haproxy's processes to these CPUs (e.g. 1 or 8-15)",
    )
    p.add_argument(
        "--client-cpus",
        type=cpu_list,
        default=[],
        help="pin this bench's client threads and the responder to these CPUs (e.g. 0)",
    )
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(run(parse_args()))
