"""The rich console featurectl prints its tables on."""

from __future__ import annotations

import errno
import os
import sys

from rich.console import Console


def stdout_console() -> Console:
    # Not a terminal (a pipe, a file): no colour and no width limit, so every row stays
    # on one line for grep/awk instead of being folded at 80 columns.
    width = None if sys.stdout.isatty() else 10_000
    return _Console(width=width, highlight=False)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's own answer to a reader that went away is exit 1; hand it to main()
        # instead, so that every command ends alike (exit 141, nothing on stderr).
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
