"""The supervisor of a multi-worker gateway (``workers`` > 1).

Modelled on uvicorn's and gunicorn's worker model: a small parent process owns the
lifecycle and the things there must be one of, and N worker processes serve clients.

The supervisor (this module; its operator endpoint in ``supervisor_http``, what it keeps
of each worker process in ``workers``):

* checks start-up once: learns the upstream's versions, reads the finalized feature
  levels and refuses to start (one message, exit 1) when they exceed the support;
* holds the one ZooKeeper registration of the gateway;
* starts the workers through ``multiprocessing``'s fork server: a fresh interpreter
  (not a fork of the supervisor, which already runs kazoo's threads that a fork would
  copy half-way) that imports the gateway once (``gateway.worker_preload``) and forks each worker
  from it, so the workers share those pages (a worker measured 20 MB PSS, against
  54 MB when each was spawned and imported everything itself); restarts one that dies (a log line,
  ``kafka_gateway_worker_restarts_total``; the others keep serving), and on SIGTERM or
  SIGINT flips readiness, lets every worker drain and exits 0; SIGHUP is passed on;
* serves ``metrics_listen``: /metrics merged from the workers' own (see
  ``observability.merge``), /connections concatenated, /healthz and /readyz.

Each worker is a full ``Gateway`` (``app.py``) with a ``WorkerRole``: it opens every
listener itself with SO_REUSEPORT (why: see ``Gateway._listen``), watches the feature
levels with its own ZooKeeper session (a finalize reaches every worker as fast as it
reaches a single-process gateway), counts its connections in the supervisor's shared
limits table (``limit_counts``: the caps and the creation rate hold gateway-wide; the
supervisor zeroes a dead worker's counts), pauses reading against 1/N of the memory
budget, serves its operator endpoint on a private loopback port, and stops when the
supervisor is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from ..config import Config, HostPort, Source, config_source, remember_source
from ..observability.logging import RateLimitedLogger, configure_logging, get_logger
from ..observability.merge import MetricsMerger
from ..observability.metrics import Metrics
from .app import Gateway
from .handover import Listener, Successor, server_listeners
from .handover_workers import SupervisorHandover, WorkerHandover
from .http import serve_http
from .limit_counts import NO_LIMIT, SharedCounts
from .limits import ConnectionLimits
from .supervisor_http import OperatorEndpoint
from .worker_role import WorkerRole
from .workers import Slot, WorkerStartFailed, how_it_exited, stop_helpers, worker_context

log = get_logger("gateway.supervisor")
# One limiter for the module: its windows must outlive each call (a worker in a crash
# loop would otherwise log every death).
limited = RateLimitedLogger("gateway.supervisor")

# A worker that dies within this long of its start is restarted after a growing delay
# (up to MAX_RESTART_DELAY_S), so one that cannot start does not spin the CPU.
STABLE_AFTER_S = 10.0
MAX_RESTART_DELAY_S = 10.0
# Extra time after drain_timeout_s for a worker to close and deregister, then SIGKILL.
STOP_GRACE_S = 5.0


class Supervisor(OperatorEndpoint):
    def __init__(self, config: Config, successor: Successor | None = None) -> None:
        self._reserved: socket.socket | None = None
        if config.listen.port == 0:
            # Every worker must bind the same port: pick it once and hold it (bound,
            # not listening, so the kernel hands it no connections).
            config = replace(config, listen=self._reserve(config.listen))
        self.config = config
        # The control plane: probe, feature gate, registration. It never listens.
        self.control = Gateway(config)
        self.metrics = self.control.metrics
        self.slots = [Slot(i) for i in range(config.workers)]
        self.merger = MetricsMerger()
        self.started = False
        self.stopping = False
        self._stop = asyncio.Event()
        # Set once metrics_listen is bound and every worker serves (as Gateway.serving).
        self.serving = asyncio.Event()
        self._http: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._context = worker_context()
        # Upgrade in place (``upgrade_socket``): gateway/server/handover.py.
        self.handover = SupervisorHandover(config, successor)
        # The workers' shared connection counts; only when something is capped (else
        # each worker counts alone, lock-free, and never refuses).
        self.limit_counts: SharedCounts | None = None
        probe = ConnectionLimits(config, self.metrics)
        if probe.max_connections < NO_LIMIT or probe.per_ip_capped or probe.rate_capped:
            path = SharedCounts.create(
                len(self.slots), probe.per_ip_capped, probe.max_connections, probe.rate
            )
            self.limit_counts = SharedCounts(path, None)

    def _reserve(self, listen: HostPort) -> HostPort:
        family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((listen.host, 0))
        self._reserved = sock
        return HostPort(listen.host, sock.getsockname()[1])

    # -- lifecycle ---------------------------------------------------------------------
    async def serve_forever(self) -> None:
        """Raises FeatureStartupError (refuse to start) or OSError (a worker cannot serve)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig.name)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        try:
            await self.control.start_control_plane()
            if self.handover.successor is None:  # else once the old one released the id
                await self.control.features.register_now()
            if self.control.features.supported is None:
                self._spawn_task(self._probe_until_known())
            if self.config.metrics_listen is not None:
                # Before the workers: /readyz answers "starting" meanwhile.
                self._http = await serve_http(
                    self.config.metrics_listen.host,
                    self.config.metrics_listen.port,
                    self.routes(),
                    sock=self.handover.metrics_socket(),
                )
            for slot in self.slots:
                self._start_worker(slot)
            await self._wait_until_serving()
            await self.handover.after_serving(
                self.control.features.register_now, self._own_listeners, self._release
            )
        except BaseException:
            self.handover.close()
            await self._stop_workers(grace_s=STOP_GRACE_S)
            await self.control.features.stop()
            if self._http is not None:
                self._http.close()
            stop_helpers()
            self._remove_limit_counts()
            raise
        self.started = True
        self.serving.set()
        self.control.probes.watch_upstream()
        log.info(
            "gateway.supervising",
            workers=len(self.slots),
            pids=[s.process.pid for s in self.slots if s.process is not None],
            listen=str(self.config.listen),
        )
        self._spawn_task(self._monitor())
        if self.config.metrics_listen is not None:
            self._spawn_task(self._refresh_metrics())
        await self._stop.wait()
        await self.shutdown()

    def request_stop(self, why: str = "stop") -> None:
        log.info("gateway.stopping", signal=why, workers=len(self.slots))
        self._stop.set()

    def reload(self) -> None:
        """SIGHUP: every worker re-reads its certificate and catalogue; so does the
        supervisor's feature gate (its compatibility check uses the catalogue)."""
        self.control.reload()
        for slot in self.slots:
            if slot.alive and slot.process is not None and slot.process.pid is not None:
                os.kill(slot.process.pid, signal.SIGHUP)

    def _own_listeners(self) -> list[Listener]:
        return server_listeners(self._http, self.config.metrics_listen)

    async def _release(self) -> None:
        """A successor serves (handover.py): it has the metrics listener and takes the
        ZooKeeper registration; this gateway stops as on SIGTERM (its workers drain)."""
        if self._http is not None:
            self._http.close()
            self._http = None
        await self.control.features.stop()
        self.request_stop("upgrade")

    async def shutdown(self) -> None:
        self.stopping = True  # readiness flips first
        self.handover.close()
        await self._stop_workers(grace_s=self.config.drain_timeout_s + STOP_GRACE_S)
        for task in self._tasks:
            task.cancel()
        await self.control.features.stop()
        if self._http is not None:
            self._http.close()
        stop_helpers()
        self._remove_limit_counts()
        log.info("gateway.stopped", workers=len(self.slots))

    def _remove_limit_counts(self) -> None:
        """The table lives in /dev/shm: remove it once no worker maps it."""
        if self.limit_counts is not None:
            self.limit_counts.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.limit_counts.path)
            self.limit_counts = None

    async def _stop_workers(self, grace_s: float) -> None:
        """SIGTERM every worker (each drains its connections), SIGKILL after grace_s."""
        self.stopping = True
        for slot in self.slots:
            if slot.alive and slot.process is not None and slot.process.pid is not None:
                os.kill(slot.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(s.alive for s in self.slots) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for slot in self.slots:
            if slot.alive and slot.process is not None:
                log.error("worker.kill", worker=slot.index, pid=slot.process.pid, after_s=grace_s)
                slot.process.kill()
                slot.process.join(1)

    # -- workers -----------------------------------------------------------------------
    def _start_worker(self, slot: Slot) -> None:
        receive, send = self._context.Pipe(duplex=False)
        limits_path = self.limit_counts.path if self.limit_counts is not None else None
        handover = self.handover.for_worker(slot.index)
        process = self._context.Process(
            target=run_worker,
            args=(self.config, slot.index, len(self.slots), os.getpid(), send, limits_path),
            kwargs={"handover": handover, "source": config_source()},
            name=f"kafka-gateway-worker-{slot.index}",
        )
        process.start()
        self.handover.started_worker(handover)
        send.close()  # the worker's end; ours reads
        slot.process, slot.conn = process, receive
        slot.started_at = time.monotonic()
        slot.ready, slot.http_port, slot.restart_at = False, None, None

    def _poll(self, slot: Slot) -> None:
        """Read what a worker reported (its readiness and private HTTP port)."""
        conn = slot.conn
        try:
            while conn is not None and conn.poll():
                kind, value = conn.recv()
                if kind == "ready":
                    slot.ready, slot.http_port = True, value
        except (EOFError, OSError):
            pass  # the worker is gone; the exit code says how

    async def _wait_until_serving(self) -> None:
        """Every worker serves, or the start fails (one that exits before serving)."""
        while True:
            for slot in self.slots:
                self._poll(slot)
                if not slot.ready and not slot.alive:
                    assert slot.process is not None
                    raise WorkerStartFailed(
                        f"worker {slot.index} exited with {how_it_exited(slot.process.exitcode)} "
                        "before serving; its log lines above say why"
                    )
            if all(s.ready for s in self.slots):
                return
            await asyncio.sleep(0.05)

    async def _monitor(self) -> None:
        while not self.stopping:
            now = time.monotonic()
            for slot in self.slots:
                self._poll(slot)
                if slot.restart_at is not None:
                    if now >= slot.restart_at and not self.stopping:
                        self._start_worker(slot)
                    continue
                if slot.alive or self.stopping:
                    continue
                self._worker_died(slot, now)
            await asyncio.sleep(0.1)

    def _worker_died(self, slot: Slot, now: float) -> None:
        assert slot.process is not None
        lived_s = now - slot.started_at
        if lived_s < STABLE_AFTER_S:
            slot.restart_delay_s = min(slot.restart_delay_s * 2, MAX_RESTART_DELAY_S)
        else:
            slot.restart_delay_s = 0.1
        self.merger.retire(slot.last_metrics)
        slot.last_metrics = {}
        released = 0
        if self.limit_counts is not None:
            # The kernel closed the dead worker's sockets; its counts must go too, or
            # its connections would hold cap slots for ever.
            released = self.limit_counts.clear_worker(slot.index)
        slot.ready = False
        if slot.conn is not None:
            slot.conn.close()
            slot.conn = None
        slot.restart_at = now + slot.restart_delay_s
        self.metrics.worker_restarts.inc()
        limited.error(
            "worker.died",
            limit_key=f"worker-{slot.index}",
            worker=slot.index,
            pid=slot.process.pid,
            exit=how_it_exited(slot.process.exitcode),
            lived_s=round(lived_s, 1),
            connections_released=released,
            action=f"restarting in {slot.restart_delay_s:.1f}s; the other workers keep serving",
        )

    async def _probe_until_known(self) -> None:
        """The broker was down at start: learn its versions later, then register (the
        feature gate registers as soon as it knows what the gateway supports)."""
        upstream = self.config.upstream
        assert upstream is not None
        while self.control.features.supported is None and not self.stopping:
            await asyncio.sleep(5.0)
            await self.control.probes.at_startup(upstream)

    def _spawn_task(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


# A worker's metrics, built by the fork server before it forks (``gateway.worker_preload``):
# each forked worker starts with its own copy (copy-on-write; nothing is counted before the
# fork) instead of building ~50 metric families itself, which left 0.3-0.5 MB more of the
# shared pages copied in each (docs/memory.md#workers-share-the-fork-servers-pages). None in a
# spawned worker: it builds its own.
_prebuilt_metrics: Metrics | None = None


def prebuild_worker_metrics() -> None:
    global _prebuilt_metrics
    _prebuilt_metrics = Metrics()


def run_worker(
    config: Config,
    index: int,
    count: int,
    parent_pid: int,
    conn: Connection,
    limits_path: str | None = None,
    handover: WorkerHandover | None = None,
    source: Source = (None, None),
) -> None:
    """A worker process's main (the target multiprocessing spawns)."""
    remember_source(source)  # SIGHUP re-reads the supervisor's config file
    import structlog
    import uvloop

    from .features import FeatureStartupError

    configure_logging(config.log_format, config.log_level)
    RateLimitedLogger.configure(config.log_bad_input_burst, config.log_bad_input_interval_s)
    # Every line a worker logs says which one it is.
    structlog.contextvars.bind_contextvars(worker=index)

    def ready(http_port: int | None) -> None:
        conn.send(("ready", http_port))

    role = WorkerRole(index, count, parent_pid, ready, limits_path, handover)
    gateway = Gateway(config, _prebuilt_metrics, worker=role)
    try:
        uvloop.run(gateway.serve_forever())
    except FeatureStartupError as exc:  # ZooKeeper unreachable at this worker's start
        log.error("worker.start_failed", worker=index, error=str(exc))
        sys.exit(1)
    except OSError as exc:
        log.error("worker.start_failed", worker=index, error=str(exc))
        sys.exit(1)
