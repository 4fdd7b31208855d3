"""How many CPUs this process may really use: the default for ``workers``.

``os.sched_getaffinity`` sees a cpuset (``taskset``, Kubernetes' static CPU manager) but
not a CFS quota: a container limited to 2 CPUs on a 64-core node sees 64, and a worker
per core would then share 2 CPUs' worth of time among 64 interpreters (54 MB each).
Go's automaxprocs and the JVM's container support read the quota for the same reason;
so does this: the smaller of the affinity and ceil(quota / period), in cgroup v2
(``cpu.max``) or v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cgroup_paths(proc_cgroup: str) -> tuple[str | None, str | None]:
    """(v2 path, v1 cpu-controller path) of this process, from /proc/self/cgroup."""
    v2 = v1 = None
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def _quota_cpus(root: Path, proc_cgroup: str) -> float | None:
    """CPUs' worth of time the CFS quota allows, or None where no quota is set.

    A nested cgroup may be limited by an ancestor, so every level up to the root is read
    and the tightest quota wins.
    """
    v2, v1 = _cgroup_paths(proc_cgroup)
    # (this cgroup's directory, the hierarchy's mount point, cgroup v2?)
    candidates: list[tuple[Path, Path, bool]] = []
    if v2 is not None:
        candidates.append((root / v2.lstrip("/"), root, True))
    if v1 is not None:
        for mount in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):
            if (root / mount).is_dir():
                candidates.append((root / mount / v1.lstrip("/"), root / mount, False))
                break
    limits: list[float] = []
    for directory, top, is_v2 in candidates:
        while True:
            if is_v2:
                fields = (_read(directory / "cpu.max") or "").split()
                if len(fields) == 2 and fields[0] != "max":
                    limits.append(int(fields[0]) / int(fields[1]))
            else:
                quota = _read(directory / "cpu.cfs_quota_us")
                period = _read(directory / "cpu.cfs_period_us")
                if quota and period and int(quota) > 0 and int(period) > 0:
                    limits.append(int(quota) / int(period))
            if directory == top or top not in directory.parents:
                break
            directory = directory.parent
    return min(limits) if limits else None


def usable_cpus(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> int:
    """The smaller of the CPUs this process may run on and its CPU quota (at least 1)."""
    affinity = len(os.sched_getaffinity(0))
    if proc_cgroup is None:
        proc_cgroup = _read(Path("/proc/self/cgroup")) or ""
    try:
        quota = _quota_cpus(root, proc_cgroup)
    except (ValueError, OSError):  # an unreadable or odd cgroupfs: the affinity stands
        quota = None
    if quota is None:
        return affinity
    return max(1, min(affinity, math.ceil(quota)))
