"""A run ends with one line naming the optional tools that are missing and what they skipped.

Each case runs a small pytest session in a subprocess with the project's conftest hook
and a PATH chosen by the test: an empty one (every tool missing), and one holding a
stand-in executable per tool (stand-ins because "all installed" is a machine state the
test cannot otherwise choose; they are only looked up, never run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.harness.tools import OPTIONAL_TOOLS

ROOT = Path(__file__).resolve().parents[3]

INNER_TESTS = """
import pytest

from tests.conftest import require_tool


def test_needs_kcat():
    require_tool("kcat")


@pytest.mark.parametrize("n", [1, 2])
def test_needs_socat(n):
    require_tool("socat", "the TLS terminator")


def test_needs_nothing():
    pass


def test_skips_for_another_reason():
    pytest.skip("not about tools")
"""


def run_inner_session(tmp_path: Path, path: Path) -> list[str]:
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_sessionfinish\n")
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    env = {**os.environ, "PATH": str(path), "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "test_inner.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


def test_the_last_line_names_each_missing_tool_and_counts_its_skips(tmp_path: Path) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    lines = run_inner_session(tmp_path, empty)
    missing = sorted(OPTIONAL_TOOLS)
    counts = ", ".join(f"{n} {dict(kcat=1, socat=2).get(n, 0)}" for n in missing)
    assert lines[-1] == (
        f"optional tools: missing {', '.join(missing)}; 3 tests skipped because of them ({counts})"
    )
    # The skip reasons themselves say how to install the tool.
    assert any("missing tool: kcat (apt-get install kcat)" in line for line in lines)


def test_the_last_line_says_all_present_when_nothing_is_missing(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in OPTIONAL_TOOLS.values():
        stand_in = bin_dir / tool.executables[0]
        stand_in.write_text("#!/bin/sh\nexit 0\n")
        stand_in.chmod(0o755)
    lines = run_inner_session(tmp_path, bin_dir)
    assert lines[-1] == f"optional tools: all present ({', '.join(OPTIONAL_TOOLS)})"
