"""The examples in `--help` (kafka-gateway, featurectl and each subcommand) run as printed.

Each example names the console script as a new shell in the current directory finds it
(gateway.commands.shell_command: `.venv/bin/featurectl` from the repository root), and
the project's parser accepts its arguments. The ones that only read or validate against
ZooKeeper also run against a live stack (tests/integration/test_first_run.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from featurectl.cli import build_parser as featurectl_parser
from gateway.cli import build_parser as gateway_parser
from gateway.commands import TOOLS, pasteable, shell_command
from tests.harness.shell import ROOT, command_lines, command_problem, simple_commands


def help_epilogs() -> dict[str, str]:
    """Every parser's epilog (the examples live there), by command."""
    epilogs = {"kafka-gateway": gateway_parser().epilog or ""}
    parser = featurectl_parser()
    epilogs["featurectl"] = parser.epilog or ""
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        epilogs[f"featurectl {name}"] = sub.epilog or ""
    return epilogs


def examples(epilog: str) -> list[list[str]]:
    """The simple commands of the epilog's example lines (prose lines are not commands)."""
    # An example line starts with one of our tools, bare or pasteable, or with curl, the one
    # other command the examples use (collect's Prometheus export).
    starts = {*TOOLS, *(shell_command(t) for t in TOOLS), "curl"}
    return [
        words
        for line in command_lines(epilog.splitlines())
        if line.split()[0] in starts
        for words in simple_commands(line)
    ]


def test_every_command_with_examples_shows_them_in_the_pasteable_form() -> None:
    with_examples = {c for c, e in help_epilogs().items() if examples(e)}
    # The commands whose help has examples today; a new one joins by having some.
    assert {"kafka-gateway", "featurectl describe", "featurectl brokers"} <= with_examples
    for command in with_examples:
        for words in examples(help_epilogs()[command]):
            assert words[0] not in TOOLS, f"{command} --help: bare {' '.join(words)}"


@pytest.mark.parametrize("command", sorted(help_epilogs()))
def test_each_example_runs_when_pasted(command: str) -> None:
    problems = [
        f"{' '.join(words)}\n    {problem}"
        for words in examples(help_epilogs()[command])
        if (problem := command_problem(words, cwd=Path.cwd())) is not None
    ]
    assert problems == [], "\n".join(problems)


def test_shell_command_is_the_path_a_new_shell_finds(tmp_path: Path) -> None:
    # Run in a child so its working directory and PATH are the ones chosen here.
    code = "from gateway.commands import shell_command; print(shell_command('featurectl'))"
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}

    def printed(cwd: Path, path: str = "/usr/bin:/bin") -> str:
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=cwd,
            env={**env, "PATH": path},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return done.stdout.strip()

    # Outside the virtualenv's tree: its absolute path; inside: relative, as the README.
    assert printed(tmp_path) == str(bin_dir / "featurectl")
    venv_root = bin_dir.parent
    assert printed(venv_root) == "bin/featurectl"
    assert printed(bin_dir) == "./featurectl"
    # An activated virtualenv is on this PATH but not on a new shell's: still a path.
    assert printed(tmp_path, f"{bin_dir}:/usr/bin:/bin") == str(bin_dir / "featurectl")


def test_pasteable_rewrites_command_positions_only() -> None:
    cmd = shell_command("featurectl")
    text = "examples:\n  featurectl describe\n  curl -s x | featurectl plan\nfeaturectl: prose\n"
    assert pasteable(text) == (
        f"examples:\n  {cmd} describe\n  curl -s x | {cmd} plan\nfeaturectl: prose\n"
    )
