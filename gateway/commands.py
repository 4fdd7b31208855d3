"""Commands the project prints (banner, ``--help`` examples) in a form that runs when pasted.

``scripts/run`` installs the project into ``.venv`` and never activates it, so a bare
``featurectl`` is "command not found" in the next shell. Every command the project shows
therefore names the console script by the path that runs it from the current directory
(``.venv/bin/featurectl`` from the repository root), or by its bare name where that is
on PATH for any shell (an installation outside a virtualenv, such as a container image).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

# Console scripts whose examples are rewritten by pasteable(): ours, and spark-submit,
# which pyspark installs beside the same interpreter.
TOOLS = ("kafka-gateway", "featurectl", "spark-submit")

# A tool name where a shell expects a command: at the start of a line (after indentation,
# as help examples are laid out) or after a shell operator.
_COMMAND_WORD = re.compile(
    r"(?P<lead>^[ \t]*|(?:&&|\|\||[|;])[ \t]*)(?P<tool>" + "|".join(TOOLS) + r")(?=[ \t]|$)",
    re.MULTILINE,
)


def shell_command(tool: str) -> str:
    """How a new shell in the current directory runs ``tool`` of this installation."""
    beside = Path(sys.executable).parent / tool
    if not beside.exists():
        return tool
    found = shutil.which(tool)
    if found is not None and Path(found).resolve() == beside.resolve():
        in_virtualenv = sys.prefix != sys.base_prefix
        # A virtualenv's bin is on PATH only in a shell that activated it.
        if not in_virtualenv or Path(found).parent.resolve() != beside.parent.resolve():
            return tool
    try:
        relative = beside.relative_to(Path.cwd())
    except ValueError:
        return shlex.quote(str(beside))
    # A word without a slash would be looked up on PATH, hence ./ in the bin directory.
    return shlex.quote(str(relative) if os.sep in str(relative) else f"./{relative}")


def pasteable(text: str) -> str:
    """``text`` (help examples) with each command-position tool name as shell_command()."""
    return _COMMAND_WORD.sub(lambda m: m["lead"] + shell_command(m["tool"]), text)


def wrap(text: str) -> str:
    """One paragraph of help wrapped as the tools lay it out (their epilogs are laid out
    by hand: RawDescriptionHelpFormatter keeps the lines it is given)."""
    return textwrap.fill(text, width=88, break_on_hyphens=False)


def add_command(
    subparsers: argparse._SubParsersAction,
    name: str,
    *,
    help_text: str,
    description: str,
    epilog: str,
    **options: Any,
) -> argparse.ArgumentParser:
    """A subcommand as every tool of the project lays it out: ``description`` one
    paragraph (wrapped here), ``epilog`` examples written line by line, their commands
    made pasteable."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help_text,
        description=wrap(description),
        epilog=pasteable(epilog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **options,
    )
    return parser


def version_text(tool: str) -> str:
    """``--version``'s line: the installed distribution's version, else the source tree's
    (a checkout run with ``python -m`` and no installation)."""
    from importlib import metadata

    try:
        version = metadata.version("kafka-gateway")
    except metadata.PackageNotFoundError:
        from gateway import __version__ as version
    return f"{tool} {version}"


def stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (``| head`` exited).

    poll() reports POLLERR on the write end of such a pipe; a BrokenPipeError from
    anything else (a socket, a child's pipe) is a real failure and is not hidden.
    """
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        events = poller.poll(0)
    except (OSError, ValueError, AttributeError):
        return False
    return any(mask & select.POLLERR for _, mask in events)


def exit_on_closed_stdout(error: BrokenPipeError) -> int:
    """The exit of a tool whose reader went away: no traceback, status 141 (128 + SIGPIPE,
    what ``| head`` leaves coreutils with, so ``set -o pipefail`` sees the same).

    Python's advice (docs.python.org/3/library/signal.html#note-on-sigpipe): point stdout
    at /dev/null, else the flush at interpreter exit fails again and prints "Exception
    ignored". Re-raises ``error`` when stdout is not what broke.
    """
    if not stdout_closed():
        raise error
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_SIGPIPE


EXIT_SIGPIPE = 128 + 13
