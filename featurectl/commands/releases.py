"""``featurectl version-mapping`` and ``feature-dependencies``: Apache Kafka's own feature
tables (``featurectl.releases``), as ``kafka-features.sh`` prints them. Need no
connection.
"""

from __future__ import annotations

import argparse
import json
import sys

from gateway.commands import add_command, wrap

from ..exits import EXIT_OK, EXIT_REJECTED, EXIT_USAGE, CliError
from ..options import check_feature_names, feature_level
from ..releases import release_table


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mapping = add_command(
        commands,
        "version-mapping",
        help_text="the feature levels an Apache Kafka release ships with",
        description=(
            "Print the level of every feature that an Apache Kafka release finalizes by "
            "default, as kafka-features.sh version-mapping does; upgrade --release-version "
            "sets the ones the gateways gate to these levels. Needs no connection."
        ),
        epilog=(
            "examples:\n  featurectl version-mapping --release-version 4.0\n"
            "  featurectl version-mapping --output json\n\n"
            + wrap(f"source: {release_table().source}")
        ),
    )
    mapping.add_argument(
        "--release-version",
        "--metadata",
        dest="release_version",
        metavar="VERSION",
        help="an Apache Kafka release such as 3.9 or 4.0.1 [the newest in the table]",
    )
    mapping.add_argument("--output", choices=["table", "json"], default="table")
    mapping.set_defaults(handler=version_mapping, parser=mapping)

    dependencies = add_command(
        commands,
        "feature-dependencies",
        help_text="what other feature levels a feature level needs",
        description=(
            "Print, for each NAME=LEVEL, the feature levels it depends on in Apache Kafka, "
            "as kafka-features.sh feature-dependencies does. Needs no connection."
        ),
        epilog=(
            "example:\n"
            "  featurectl feature-dependencies --feature eligible.leader.replicas.version=1\n\n"
            + wrap(f"source: {release_table().source}")
        ),
    )
    dependencies.add_argument(
        "--feature",
        action="append",
        required=True,
        type=feature_level,
        metavar="NAME=LEVEL",
        help="a feature level to look up (repeat for several)",
    )
    dependencies.set_defaults(handler=feature_dependencies, parser=dependencies)


def version_mapping(args: argparse.Namespace) -> int:
    table = release_table()
    release = args.release_version or list(table.releases)[-1]
    try:
        levels = table.levels(release)
    except KeyError as exc:
        raise CliError(EXIT_USAGE, str(exc.args[0])) from None
    if args.output == "json":
        print(json.dumps({"release_version": release, "features": levels}, indent=2))
        return EXIT_OK
    for name, level in sorted(levels.items()):
        print(f"{name}={level}")
    return EXIT_OK


def feature_dependencies(args: argparse.Namespace) -> int:
    table = release_table()
    known = {name for levels in table.releases.values() for name in levels}
    check_feature_names([name for name, _ in args.feature], known)
    code = EXIT_OK
    for name, level in args.feature:
        if level > table.max_level(name):
            # kafka-features.sh's words and exit code for a level its release lacks.
            print(f"No feature:{name} with feature level {level}", file=sys.stderr)
            code = EXIT_REJECTED
            continue
        needs = table.needs(name, level)
        if not needs:
            print(f"{name}={level} has no dependencies.")
        else:
            print(f"{name}={level} requires:")
            for dep, dep_level in sorted(needs.items()):
                print(f"    {dep}={dep_level}")
    return code
