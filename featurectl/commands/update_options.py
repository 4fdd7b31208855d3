"""The command line of ``featurectl finalize`` (alias ``upgrade``), ``downgrade`` and
``disable``: their options and the help that teaches them. What they do is
``featurectl.commands.update``'s.
"""

from __future__ import annotations

import argparse

from gateway.commands import add_command

from ..exits import EXIT_CODES
from ..options import CONNECTION, KAFKA_CONNECTION, common_options, feature_level, feature_name
from .update import update

_JSON = """\
json (--output json): one document on stdout whenever the update was validated
(exit 0, or 1 for a rejection or a conflict); other failures print only to stderr.
  command      "finalize" | "downgrade" | "disable"
  ok           true when written (or, with dry_run, when it would be written)
  dry_run      true with --dry-run
  old_epoch    the epoch the update was validated against (-1: never finalized)
  new_epoch    the epoch after the write; null unless written
  changes      [{"feature", "from", "to"}] levels changed (or that would change)
  errors       [{"feature", "error_code", "message", "blocking_gateways": [ids]}]
  conflict     null, or {"expected_epoch", "actual_epoch"} when another change won"""


_FINALIZE_EPILOG = f"""\
examples:
  featurectl finalize --zookeeper zk-0:2181 --feature group.version=1
  featurectl finalize --feature transaction.version=2 --feature share.version=1 --dry-run
  featurectl --bootstrap-server gw-0:9092 upgrade --feature group.version=1
  featurectl --bootstrap-server gw-0:9092 upgrade --release-version 4.0 --dry-run

--release-version/--metadata VERSION sets every feature the gateways gate to the level
that Apache Kafka release ships with (featurectl version-mapping shows them); features
no live gateway can serve (metadata.version, which only KRaft has, or what the brokers
behind the gateways lack) are skipped with a note on stderr, and so are features the
release has at the level they are already at.

output: one line per change ("group.version: 0 → 1"), then "epoch: 3 → 4".

{_JSON}

{CONNECTION}

{KAFKA_CONNECTION}

{EXIT_CODES}"""

_DOWNGRADE_EPILOG = f"""\
examples:
  featurectl downgrade --feature transaction.version=1 --allow-downgrade
  featurectl downgrade --feature group.version=0 --allow-downgrade   # same as disable
  featurectl downgrade --feature transaction.version=1 --allow-downgrade --dry-run
  featurectl --bootstrap-server gw-0:9092 downgrade --release-version 3.9 --allow-downgrade

{_JSON}

{CONNECTION}

{KAFKA_CONNECTION}

{EXIT_CODES}"""

_DISABLE_EPILOG = f"""\
examples:
  featurectl disable --feature share.version --allow-downgrade
  featurectl disable --feature share.version --feature streams.version --allow-downgrade
  featurectl --bootstrap-server gw-0:9092 disable --feature share.version --allow-downgrade

{_JSON}

{CONNECTION}

{KAFKA_CONNECTION}

{EXIT_CODES}"""


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """finalize (and its alias upgrade), downgrade, disable."""
    common = common_options()
    _add_update_command(
        commands,
        common,
        "finalize",
        help_text="raise finalized feature levels (alias: upgrade, as kafka-features.sh)",
        aliases=("upgrade",),
        description="Finalize (upgrade) feature levels cluster-wide. Every live gateway must "
        "support each new level; then the levels are written with a compare-and-set on the "
        "epoch that was read, so a concurrent change is never lost: the later writer gets a "
        "conflict and re-runs. Either every update is applied or none.",
        epilog=_FINALIZE_EPILOG,
    )
    _add_update_command(
        commands,
        common,
        "downgrade",
        help_text="lower finalized feature levels (needs --allow-downgrade)",
        description="Lower finalized feature levels (level 0 disables the feature). Clients "
        "that use API versions only the higher level allows can fail, hence "
        "--allow-downgrade. Every live gateway must support each new level >= 1; the write "
        "is a compare-and-set on the epoch that was read. Either every update is applied or "
        "none.",
        epilog=_DOWNGRADE_EPILOG,
    )
    _add_update_command(
        commands,
        common,
        "disable",
        help_text="remove finalized feature levels (needs --allow-downgrade)",
        description="Remove the finalized level of features, withdrawing the API versions "
        "they gate from clients (a downgrade to level 0, hence --allow-downgrade). The write "
        "is a compare-and-set on the epoch that was read. Either every update is applied or "
        "none.",
        epilog=_DISABLE_EPILOG,
    )


def _add_update_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    name: str,
    *,
    help_text: str,
    description: str,
    epilog: str,
    aliases: tuple[str, ...] = (),
) -> argparse.ArgumentParser:
    parser = add_command(
        commands,
        name,
        aliases=list(aliases),
        parents=[common],
        help_text=help_text,
        description=description,
        epilog=epilog,
    )
    if name == "disable":
        parser.add_argument(
            "--feature",
            action="append",
            required=True,
            type=feature_name,
            metavar="NAME",
            help="a feature whose finalized level to remove (repeat for several)",
        )
    else:
        parser.add_argument(
            "--feature",
            action="append",
            type=feature_level,
            metavar="NAME=LEVEL",
            help="a feature and its new finalized level (repeat for several)",
        )
        parser.add_argument(
            "--release-version",
            "--metadata",
            dest="release_version",
            metavar="VERSION",
            help="every feature to the level Apache Kafka VERSION ships with (e.g. 4.0); "
            "instead of --feature",
        )
    if name != "finalize":
        parser.add_argument(
            "--allow-downgrade",
            action="store_true",
            help="confirm that lowering levels may break clients using newer API versions",
        )
        parser.add_argument(
            "--unsafe",
            action="store_true",
            help="ask for an UNSAFE_DOWNGRADE (ZooKeeper mode treats it as a safe one)",
        )
    parser.add_argument(
        "--dry-run", action="store_true", help="validate and show the changes; write nothing"
    )
    parser.set_defaults(handler=update, parser=parser)
    return parser


__all__ = ["add_parsers"]
