"""The worker processes of a supervised gateway, as the supervisor keeps them: one
``Slot`` per position, how they are started (``worker_context``), how one ended, and
the helper processes multiprocessing leaves behind."""

from __future__ import annotations

import multiprocessing
import signal
import tempfile
from dataclasses import dataclass, field
from multiprocessing import forkserver, resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from ..observability.logging import get_logger
from ..observability.merge import Parsed

log = get_logger("gateway.supervisor")


class WorkerStartFailed(OSError):
    """A worker exited before it served (a listener it cannot open, ...)."""


@dataclass
class Slot:
    """One worker position: its current process and what the supervisor knows of it."""

    index: int
    process: BaseProcess | None = None
    conn: Connection | None = None
    started_at: float = 0.0
    ready: bool = False
    http_port: int | None = None
    restart_delay_s: float = 0.1
    restart_at: float | None = None
    last_metrics: Parsed = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.exitcode is None


def worker_context() -> multiprocessing.context.BaseContext:
    """The fork server, or "spawn" where it cannot run.

    The fork server listens on a Unix socket in the temp directory; on a read-only root
    file system without a writable /tmp (Kubernetes' readOnlyRootFilesystem), it cannot,
    and "spawn" still can (pipes only), at the cost of each worker's own imports.
    """
    try:
        tempfile.gettempdir()  # raises when no candidate directory is writable
    except OSError as exc:
        log.warning(
            "workers.start_method",
            method="spawn",
            reason=f"no writable temp directory for the fork server: {exc}",
            fix="mount a writable /tmp (or set TMPDIR) to share ~30 MB per worker",
        )
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # A preload that fails to import is skipped by multiprocessing: the workers then
    # import what they need themselves, as spawned ones would.
    context.set_forkserver_preload(["gateway.worker_preload"])
    return context


def stop_helpers() -> None:
    """Stop multiprocessing's fork server and the resource tracker it starts, once the
    workers are gone, so the gateway leaves no process behind (service managers and
    tests see the group). Nothing here uses what the tracker tracks (the limits table is
    a file the supervisor removes itself)."""
    for helper in (
        getattr(forkserver, "_forkserver", None),
        getattr(resource_tracker, "_resource_tracker", None),
    ):
        stop = getattr(helper, "_stop", None)  # private; absent: each ends on EOF
        if stop is not None:
            stop()


def how_it_exited(exitcode: int | None) -> str:
    if exitcode is None:
        return "no exit code"
    if exitcode < 0:
        return f"signal {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"
