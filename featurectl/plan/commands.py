"""The ``collect`` and ``plan`` subcommands, for featurectl's parser (``featurectl.cli``).

Kept apart from the CLI module so the planner's arguments live next to its code;
neither import pulls in PySpark (``plan`` imports it when it runs).
"""

from __future__ import annotations

import argparse

from featurectl.collect import add_collect_subcommand
from featurectl.plan.job import add_plan_subcommand


def add_subcommands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``collect`` and ``plan``; each sets ``handler`` (and ``parser``) defaults."""
    add_collect_subcommand(subparsers)
    add_plan_subcommand(subparsers)


__all__ = ["add_subcommands"]
