"""``featurectl plan`` as the integration tests run it: a child process of this Python,
its exit status checked, its plan.json read back.

Each test keeps its own options (state source, catalogue, targets, Spark master) and
environment; what they share is the command line's head and the reading of the result.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def plan_command(metrics: Path, *options: str) -> list[str]:
    """``python -m featurectl plan --metrics METRICS OPTIONS...``, with this interpreter."""
    return [sys.executable, "-m", "featurectl", "plan", "--metrics", str(metrics), *options]


def featurectl_plan(
    metrics: Path,
    out: Path,
    *options: str,
    env: Mapping[str, str],
    timeout_s: float,
    cwd: Path | None = None,
    exit_status: int = 1,
) -> dict[str, Any]:
    """Plan ``metrics`` into ``out`` and return its plan.json.

    ``exit_status``: what the run must exit with (1: written, and a target is not safe;
    0: written, every target safe); the AssertionError carries the tail of stderr.
    """
    done = subprocess.run(
        plan_command(metrics, "--out", str(out), *options),
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=timeout_s,
        cwd=cwd,
    )
    assert done.returncode == exit_status, done.stderr[-4000:]
    return json.loads((out / "plan.json").read_text())
