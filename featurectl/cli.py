"""``featurectl``: the operator's command line for kafka-gateway.

Exit codes: 0 ok, 1 the request was answered but rejected or failed, 2 usage or
connection error.

The feature commands (KIP-584) only wire I/O: read the finalized levels and the live
gateway registrations from ZooKeeper (``gateway.features.store``), let
``featurectl.features`` compute rows or validate the update, print, and write with a
compare-and-set on the epoch that was read.

With ``--bootstrap-server`` the same commands go through any gateway over the Kafka
protocol instead, as ``kafka-features.sh`` does (``featurectl.kafka``): describe is an
ApiVersions v4 request, changes are UpdateFeatures requests, and the output and exit
codes are the same.

Each command family lives in its own module under ``featurectl.commands`` (its parser
and its handler); this module builds the top-level parser from them and runs one.
"""

from __future__ import annotations

import argparse
import os
import sys

from gateway.commands import exit_on_closed_stdout, version_text, wrap
from gateway.features.store import ZOOKEEPER_ENV

from .commands import describe, releases, software, update, update_options
from .commands.update import DISABLE_REFUSED, DOWNGRADE_REFUSED
from .exits import EXIT_CODES, EXIT_OK, EXIT_REJECTED, EXIT_USAGE, CliError
from .features import COMMANDS
from .kafka import split_address
from .options import kafka_options, zookeeper_options
from .plan.commands import add_subcommands as add_planner_subcommands
from .releases import release_table

# What callers (the integration tests, the protocol tests) name as featurectl.cli's
# though it lives in the command modules: the refusal texts and the update handler.
_update = update.update
__all__ = [
    "DISABLE_REFUSED",
    "DOWNGRADE_REFUSED",
    "EXIT_OK",
    "EXIT_REJECTED",
    "EXIT_USAGE",
    "build_parser",
    "main",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="featurectl",
        description=wrap(
            "Operate kafka-gateway: cluster-wide finalized feature levels (KIP-584), kept in "
            "ZooKeeper, and the broker software behind each gateway (KIP-885)."
        ),
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_text("featurectl"))
    zookeeper_options(
        parser.add_argument_group("ZooKeeper (also accepted after the command word, which wins)"),
        top_level=True,
    )
    kafka_options(
        parser.add_argument_group("Kafka protocol (also accepted after the command word)"),
        top_level=True,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    describe.add_parser(commands)
    update_options.add_parsers(commands)
    releases.add_parsers(commands)
    software.add_parser(commands)
    add_planner_subcommands(commands)
    for name in ("collect", "plan"):
        _defer_to_top_level(commands.choices[name], ("zookeeper", "chroot"))
    return parser


def _defer_to_top_level(parser: argparse.ArgumentParser, dests: tuple[str, ...]) -> None:
    """Let the top-level --zookeeper/--chroot reach a command that defines its own.

    collect and plan define them with the same defaults as the top level (their parsers
    are used standalone too, so they keep them there); under featurectl the subparser's
    default would overwrite a value given before the command word, so it is dropped
    here, and the top level's default stands in for it.
    """
    for action in parser._actions:
        if action.dest in dests:
            if action.help:
                action.help = action.help.replace("%(default)s", str(action.default))
            action.default = argparse.SUPPRESS


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            code = _main(argv)
        finally:
            # Flushed here rather than at interpreter exit, so that a reader that went
            # away (``| head``) surfaces below and not as "Exception ignored" on stderr;
            # argparse's own output (--help, --version) then exits through here too.
            sys.stdout.flush()
    except BrokenPipeError as error:
        return exit_on_closed_stdout(error)
    return code


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.command == "upgrade":
        args.command = "finalize"  # kafka-features.sh's word for it
    if args.command in ("describe", *COMMANDS):
        _check_connection_arguments(args)
    try:
        return args.handler(args)
    except CliError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return exc.code


def _check_connection_arguments(args: argparse.Namespace) -> None:
    """Exactly one of ZooKeeper and --bootstrap-server; what each update command needs."""
    if args.bootstrap_server is not None:
        # An inherited $KAFKA_GATEWAY_ZOOKEEPER does not conflict; an explicit one does.
        explicit_zookeeper = args.zookeeper and args.zookeeper != os.environ.get(ZOOKEEPER_ENV)
        if explicit_zookeeper:
            args.parser.error("pass --zookeeper or --bootstrap-server, not both")
        try:
            split_address(args.bootstrap_server)
        except ValueError as exc:
            args.parser.error(f"--bootstrap-server: {exc}")
    elif args.command_config is not None:
        args.parser.error("--command-config needs --bootstrap-server")
    elif not args.zookeeper:
        args.parser.error(
            f"--zookeeper is required (or set {ZOOKEEPER_ENV}), or --bootstrap-server HOST:PORT"
        )
    if args.command in ("finalize", "downgrade"):
        if (args.feature is None) == (args.release_version is None):
            args.parser.error("pass --feature NAME=LEVEL (repeatable) or --release-version")
        if args.release_version is not None:
            try:
                release_table().levels(args.release_version)
            except KeyError as exc:
                args.parser.error(str(exc.args[0]))


if __name__ == "__main__":
    sys.exit(main())
