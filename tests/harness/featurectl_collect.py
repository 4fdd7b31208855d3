"""``featurectl collect`` as the integration tests run it: a child process of this Python,
stopped as an operator stops it (SIGTERM), its exit status checked. Kept free of pytest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from featurectl.plan.layout import STATE


def environ_without_zookeeper() -> dict[str, str]:
    """This process's environment less the gateway's ZooKeeper settings: featurectl reads
    the ZooKeeper its command line names, not the one the test session's gateways use."""
    return {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_GATEWAY_ZOOKEEPER")}


@dataclass
class Collecting:
    process: subprocess.Popen[str]
    stderr: str = ""  # what it wrote there, once stopped


@contextmanager
def featurectl_collect(
    zookeeper: str, chroot: str, out: Path, *options: str
) -> Iterator[Collecting]:
    """Collect the gateways registered under ``chroot`` into ``out`` for the ``with``
    block; then SIGTERM, and it must exit 0 (the AssertionError carries its stderr). Killed
    instead where the block raises."""
    collect = subprocess.Popen(
        [sys.executable, "-m", "featurectl", "collect", "--zookeeper", zookeeper,
         "--chroot", chroot, "--out", str(out), *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=environ_without_zookeeper(),
    )  # fmt: skip
    collecting = Collecting(collect)
    try:
        yield collecting
        collect.send_signal(signal.SIGTERM)
        _, collecting.stderr = collect.communicate(timeout=30)
    finally:
        if collect.poll() is None:
            collect.kill()
            collect.wait()
    assert collect.returncode == 0, collecting.stderr


def rounds(out: Path) -> int:
    """The rounds collect has finished into ``out`` (each writes a state snapshot)."""
    return len(list((out / STATE).glob("*.json")))
