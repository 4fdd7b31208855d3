"""The default worker count honours a CFS quota as well as the affinity.

This machine runs under no CPU quota, so the cgroup trees here are directories made by
the test in the layout the kernel uses (cgroup v2 and v1): the only way to present a quota.
"""

from __future__ import annotations

import os
from pathlib import Path

from gateway.cpus import usable_cpus

AFFINITY = len(os.sched_getaffinity(0))


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def test_no_quota_means_the_affinity(tmp_path: Path) -> None:
    write(tmp_path / "kubepods" / "pod1" / "cpu.max", "max 100000")
    assert usable_cpus(tmp_path, "0::/kubepods/pod1\n") == AFFINITY


def test_a_v2_quota_rounds_up_and_never_exceeds_the_affinity(tmp_path: Path) -> None:
    write(tmp_path / "kubepods" / "pod1" / "cpu.max", "50000 100000")  # half a CPU
    assert usable_cpus(tmp_path, "0::/kubepods/pod1\n") == 1
    write(tmp_path / "kubepods" / "pod1" / "cpu.max", f"{(AFFINITY + 8) * 100000} 100000")
    assert usable_cpus(tmp_path, "0::/kubepods/pod1\n") == AFFINITY


def test_an_ancestors_quota_limits_a_nested_cgroup(tmp_path: Path) -> None:
    write(tmp_path / "kubepods" / "cpu.max", "100000 100000")  # 1 CPU for the pod
    write(tmp_path / "kubepods" / "c1" / "cpu.max", "max 100000")
    assert usable_cpus(tmp_path, "0::/kubepods/c1\n") == 1


def test_a_v1_quota(tmp_path: Path) -> None:
    leaf = tmp_path / "cpu,cpuacct" / "docker" / "abc"
    write(leaf / "cpu.cfs_quota_us", "100000")
    write(leaf / "cpu.cfs_period_us", "100000")
    write(tmp_path / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1")  # the root: unlimited
    write(tmp_path / "cpu,cpuacct" / "cpu.cfs_period_us", "100000")
    cgroup = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n"
    assert usable_cpus(tmp_path, cgroup) == 1


def test_an_unreadable_tree_falls_back_to_the_affinity(tmp_path: Path) -> None:
    write(tmp_path / "x" / "cpu.max", "garbage here")
    assert usable_cpus(tmp_path, "0::/x\n") == AFFINITY
    assert usable_cpus(tmp_path / "absent", "0::/x\n") == AFFINITY
