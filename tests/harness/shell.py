"""Read the shell commands the project prints (README blocks, help examples, the banner)
and judge them as a new shell in the repository root would.

A new shell has not activated ``.venv``: ``new_shell_env()`` is this environment without
the virtualenv's bin directory on PATH (and without variables that point Python or
featurectl somewhere), so a bare ``featurectl`` is "command not found" there, as it is
for a user who pastes it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from featurectl.cli import build_parser as featurectl_parser
from gateway.cli import build_parser as gateway_parser

from .tools import OPTIONAL_TOOLS

ROOT = Path(__file__).resolve().parents[2]
# The bin directory of the virtualenv these tests run in: scripts/test's .venv in CI.
VENV_BIN = Path(sys.executable).parent

# Shell operators that end one simple command and start the next.
_OPERATORS = {"|", "||", "&&", ";", "&", "(", ")"}
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)$")
_SHELL_INFO = {"sh", "bash", "shell", "console"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class ShellBlock:
    """A fenced shell code block: the line number of its fence and its lines, dedented."""

    line: int
    lines: list[str]


def markdown_shell_blocks(text: str) -> list[ShellBlock]:
    """Every ```sh (bash, shell, console) block, also those indented inside list items."""
    blocks: list[ShellBlock] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        indent, info = fence["indent"], fence["info"].strip().split(" ")[0]
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if info in _SHELL_INFO:
            body = [line.removeprefix(indent) for line in lines[i + 1 : end]]
            blocks.append(ShellBlock(i + 1, body))
        i = end + 1
    return blocks


def command_lines(lines: list[str]) -> list[str]:
    """The command lines: backslash continuations joined, blank and comment lines dropped."""
    joined: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if full and not full.startswith("#"):
            joined.append(full)
    return joined


def simple_commands(line: str) -> list[list[str]]:
    """The words of each simple command on ``line``, leading VAR=value assignments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    redirect_target = False
    for token in lexer:
        if redirect_target:
            redirect_target = False  # the file of `> gw.json`, not a command
        elif token in _OPERATORS:
            commands.append([])
        elif set(token) <= set("<>&"):
            redirect_target = True
        else:
            commands[-1].append(token)
    result = []
    for words in commands:
        while words and _ASSIGNMENT.match(words[0]):
            words = words[1:]
        if words:
            result.append(words)
    return result


def new_shell_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment as a new shell has it: no virtualenv on PATH, no Python overrides."""
    dropped = {str(VENV_BIN), str(ROOT / ".venv" / "bin")}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in dropped]
    overrides = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in overrides and not k.startswith("KAFKA_GATEWAY")
    }
    env["PATH"] = os.pathsep.join(path)
    env.update(extra or {})
    return env


def resolves(word: str, cwd: Path = ROOT) -> bool:
    """Whether a new shell in ``cwd`` finds ``word`` (a builtin, a PATH entry or a path)."""
    probe = subprocess.run(
        ["bash", "-c", 'command -v -- "$1"', "bash", word],
        cwd=cwd,
        env=new_shell_env(),
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


def venv_only(word: str) -> bool:
    """A bare command name that only an activated virtualenv would find (featurectl, ...)."""
    return "/" not in word and (VENV_BIN / word).exists() and not resolves(word)


def iter_words(lines: list[str]) -> Iterator[tuple[str, list[str]]]:
    """(command line, words of one simple command) for every command in ``lines``."""
    for line in command_lines(lines):
        for words in simple_commands(line):
            yield line, words


# The project's commands, by console script and by `python -m` module, and their parsers.
PROJECT_PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "kafka-gateway": gateway_parser,
    "featurectl": featurectl_parser,
}
PROJECT_MODULES = {"gateway": "kafka-gateway", "featurectl": "featurectl"}
_OPTIONAL_EXECUTABLES = {e for tool in OPTIONAL_TOOLS.values() for e in tool.executables}


def parse_problem(tool: str, args: list[str]) -> str | None:
    """What the project's own parser says about ``args`` (None: it accepts them)."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            PROJECT_PARSERS[tool]().parse_args(args)
    except SystemExit as exc:
        if exc.code not in (0, None):
            return errors.getvalue().strip().splitlines()[-1]
    return None


def command_problem(words: list[str], cwd: Path = ROOT) -> str | None:
    """Why pasting this simple command into a new shell in ``cwd`` fails (None: it runs).

    Checked: the command word is found (a path, a builtin or on PATH, or an optional tool
    the tests know), a project command is not written bare (only an activated virtualenv
    finds that), and the project's parser accepts the arguments.
    """
    word, args = words[0], words[1:]
    name = Path(word).name
    if venv_only(word):
        return f"{word!r} runs only in an activated virtualenv: write .venv/bin/{word}"
    if word.startswith(".venv/bin/"):
        if not (VENV_BIN / name).exists():
            return f"{word}: the project's virtualenv has no {name}"
    elif not resolves(word, cwd) and word not in _OPTIONAL_EXECUTABLES:
        return f"{word}: a new shell in {cwd} finds no such command"
    if name.startswith("python") and args[:1] == ["-m"] and args[1:2]:
        module = args[1]
        if module not in PROJECT_MODULES:
            return None
        if not word.startswith(".venv/bin/") and Path(word).parent != VENV_BIN:
            return f"{word} -m {module}: only the project's virtualenv has it: .venv/bin/python"
        tool, args = PROJECT_MODULES[module], args[2:]
    elif name in PROJECT_PARSERS:
        tool = name
    else:
        return None
    problem = parse_problem(tool, args)
    return f"{tool} rejects the arguments: {problem}" if problem else None
