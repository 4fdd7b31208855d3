"""The ``collect``, ``convert`` and ``plan`` subcommands, for featurectl's parser.

Kept apart from the CLI module so the planner's arguments live next to its code;
neither import pulls in PySpark (``plan`` imports it when it runs).
"""

from __future__ import annotations

import argparse

from featurectl.collect_options import add_collect_subcommand
from featurectl.plan.convert import add_convert_subcommand
from featurectl.plan.job import add_plan_subcommand


def add_subcommands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``collect``, ``convert`` and ``plan``; each sets ``handler`` and ``parser``."""
    add_collect_subcommand(subparsers)
    add_convert_subcommand(subparsers)
    add_plan_subcommand(subparsers)


__all__ = ["add_subcommands"]
