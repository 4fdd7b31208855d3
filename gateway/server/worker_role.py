"""What a Gateway needs to know when it runs as one worker of a supervised gateway.

Kept apart from ``supervisor`` (which imports ``app``) so ``app`` can depend on it
without an import circle.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .handover_workers import WorkerHandover


@dataclass(frozen=True, slots=True)
class WorkerRole:
    index: int
    count: int
    # The supervisor's pid: a worker whose supervisor is gone (killed) stops, rather
    # than serving on unsupervised.
    parent_pid: int
    # Called once the worker serves: with the port of its private HTTP endpoint
    # (127.0.0.1; the supervisor reads /metrics, /connections and /readyz there), or
    # None when the gateway has no metrics_listen.
    ready: Callable[[int | None], None]
    # The supervisor's shared connection-limits table (``limit_counts.SharedCounts``);
    # None when no cap or creation rate is configured (nothing to share).
    limits_path: str | None = None
    # Upgrade in place (``upgrade_socket``): the supervisor's channel for this worker's
    # listening sockets, and the sockets it inherits from the old gateway's worker.
    handover: WorkerHandover | None = None

    def orphaned(self) -> bool:
        # A worker's parent is the fork server, not the supervisor, so getppid() cannot
        # tell; multiprocessing hands the child a sentinel of the process that asked for
        # it, which reads as closed once that process is gone.
        parent = multiprocessing.parent_process()
        if parent is not None and parent.pid == self.parent_pid:
            return not parent.is_alive()
        return os.getppid() != self.parent_pid
