"""Processes: how many serve, how they stop, and how a new one takes over.

The top level of the TOML file.
"""

# setting() is a dataclasses.field with metadata; ruff only knows field() itself as one.
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass

from ..cpus import usable_cpus
from ._declare import ConfigError, Seconds, between, positive, setting

MAX_WORKERS = 512


def default_workers() -> int:
    return usable_cpus()


def _socket_path(key: str, value: str | None) -> None:
    # sun_path holds 107 bytes and a NUL; a longer path cannot be bound.
    if value is not None and not 0 < len(value.encode()) < 108:
        raise ConfigError(key, "must be a path of 1 to 107 bytes")


@dataclass(frozen=True)
class Processes:
    """Processes."""

    __slots__ = ()

    workers: int = setting(
        factory=default_workers,
        flag="--workers",
        check=between(1, MAX_WORKERS, " processes"),
        default_means="the CPUs this process may use (its affinity, capped by a cgroup CPU "
        "quota, not the host's core count: gateway/cpus.py)",
        example=4,
        why="worker processes, each accepting on every listener (SO_REUSEPORT); 1: a "
        "single process, no supervisor",
    )
    drain_timeout_s: Seconds = setting(
        30.0, check=positive, why="how long SIGTERM waits for in-flight requests"
    )
    upgrade_socket: str | None = setting(
        None,
        flag="--upgrade-socket",
        metavar="PATH",
        check=_socket_path,
        default_means="off",
        example="/run/kafka-gateway/upgrade.sock",
        see="upgrade-in-place.md",
        why="upgrade in place: a running gateway listens on this Unix socket; a new one "
        "started with the same path takes its listening sockets over, and the old one "
        "drains and exits 0",
    )
