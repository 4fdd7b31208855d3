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
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import errno
import getpass
import json
import logging
import os
import socket
import sys
import warnings
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import asdict

from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from rich.console import Console

from gateway.commands import (
    add_command,
    exit_on_closed_stdout,
    shell_command,
    version_text,
    wrap,
)
from gateway.features.catalogue import load_catalogue
from gateway.features.store import (
    DEFAULT_CHROOT,
    ZOOKEEPER_ENV,
    EpochConflict,
    FeatureStore,
    ZooKeeperTls,
    make_client,
    normalize_chroot,
)
from gateway.features.validation import FeatureUpdate, validate_updates
from gateway.features.znode import Finalized, Registration, ZNodeError
from gateway.observability.logging import configure_logging

from .features import (
    COMMANDS,
    FeatureRow,
    Outcome,
    answered_plan,
    describe_document,
    describe_rows,
    feature_updates,
    features_table,
    gateways_table,
    outcome_document,
    outcome_lines,
    plan_updates,
)
from .kafka import (
    SUPPORTED_KEYS,
    ClientConfig,
    CommandConfigError,
    Described,
    KafkaClient,
    KafkaClientError,
    load_command_config,
    split_address,
    update_features_range,
)
from .kafka_format import DESCRIBE_OUTPUTS
from .kafka_format import describe_lines as kafka_describe_lines
from .plan.commands import add_subcommands as add_planner_subcommands
from .releases import release_table, release_updates

EXIT_OK = 0
EXIT_REJECTED = 1
EXIT_USAGE = 2

ZOOKEEPER_AUTH_ENV = "KAFKA_GATEWAY_ZOOKEEPER_AUTH"
ZOOKEEPER_SASL_ENV = "KAFKA_GATEWAY_ZOOKEEPER_SASL"
DEFAULT_TIMEOUT_S = 10.0

_EXIT_CODES = """\
exit codes:
  0  ok
  1  rejected: the request was answered but refused or failed (invalid level, a
     gateway that cannot serve it, a concurrent change, not authorized by ZooKeeper or,
     with --bootstrap-server, by the gateway: its error text is printed)
  2  usage error, or ZooKeeper / the --bootstrap-server gateway unreachable"""

_KAFKA_CONNECTION = "\n".join(
    [
        "kafka protocol (--bootstrap-server HOST:PORT, before or after the command word):",
        "  describe reads ApiVersions (SupportedFeatures, FinalizedFeatures, their epoch) from",
        "  that one gateway; finalize/downgrade/disable send UpdateFeatures to it, and the",
        "  gateway validates and writes exactly as the ZooKeeper path does (--dry-run uses",
        "  UpdateFeatures v1 ValidateOnly). The gateway must allow the client",
        "  (features.update_allowed_from / update_allowed_principals), else exit 1 with its",
        "  error text. The ZooKeeper path sees more: every live gateway's registration",
        "  (LimitedBy, the gateways table) and a compare-and-set on the epoch; over the",
        "  protocol, SupportedMin/MaxVersion are the answering gateway's own ranges.",
        "  --command-config FILE is a Kafka client properties file; keys honoured:",
        *(f"    {key}\n        {what}" for key, what in SUPPORTED_KEYS.items()),
    ]
)

_CONNECTION = f"""\
connection:
  --zookeeper defaults to ${ZOOKEEPER_ENV},
  --zookeeper-auth to ${ZOOKEEPER_AUTH_ENV}.
  A feature znode created with --zookeeper-auth USER:PASSWORD (ZooKeeper digest) is
  writable only by that user (everyone may read it); writing it without those
  credentials fails with "not authorized" and exit code 1."""

_UPDATE_JSON = """\
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

_DESCRIBE_EPILOG = f"""\
examples:
  featurectl describe --zookeeper zk-0:2181
  featurectl describe --feature group.version --output json
  featurectl --bootstrap-server gw-0:9092 describe
  (TLS/SASL listeners: add --command-config admin.properties, keys below)

columns:
  SupportedMinVersion  the levels EVERY live gateway supports: the highest minimum
  SupportedMaxVersion  and the lowest maximum over all live gateways ('-': none live)
  FinalizedVersionLevel  the cluster-wide level (0: not finalized)
  Epoch                the finalized features' epoch ('-': never finalized)
  LimitedBy            gateways whose maximum is the cluster-wide one while another
                       gateway could serve more: the ones holding the feature back

json (--output json): one document on stdout
  epoch      the finalized features' epoch (-1: never finalized)
  features   [{{"feature", "description" (null if not in the built-in catalogue),
               "supported_min_version", "supported_max_version" (null: no live
               gateway), "finalized_version_level", "limited_by": [ids]}}]
  gateways   [{{"id", "listener", "upstream", "broker_software_name",
               "broker_software_version", "gateway_version", "metrics_url",
               "features": {{NAME: {{"min_version", "max_version"}}}}}}]

kafka (--output kafka): kafka-features.sh describe's own lines (Apache Kafka 4.4), for
scripts written for that tool: "Feature: NAME  SupportedMinVersion: N  ...  Epoch: E",
only the features every live gateway (--bootstrap-server: the answering one) supports

{_CONNECTION}

{_KAFKA_CONNECTION}

{_EXIT_CODES}"""

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

{_UPDATE_JSON}

{_CONNECTION}

{_KAFKA_CONNECTION}

{_EXIT_CODES}"""

_DOWNGRADE_EPILOG = f"""\
examples:
  featurectl downgrade --feature transaction.version=1 --allow-downgrade
  featurectl downgrade --feature group.version=0 --allow-downgrade   # same as disable
  featurectl downgrade --feature transaction.version=1 --allow-downgrade --dry-run
  featurectl --bootstrap-server gw-0:9092 downgrade --release-version 3.9 --allow-downgrade

{_UPDATE_JSON}

{_CONNECTION}

{_KAFKA_CONNECTION}

{_EXIT_CODES}"""

_DISABLE_EPILOG = f"""\
examples:
  featurectl disable --feature share.version --allow-downgrade
  featurectl disable --feature share.version --feature streams.version --allow-downgrade
  featurectl --bootstrap-server gw-0:9092 disable --feature share.version --allow-downgrade

{_UPDATE_JSON}

{_CONNECTION}

{_KAFKA_CONNECTION}

{_EXIT_CODES}"""

DOWNGRADE_REFUSED = (
    "refusing to downgrade: downgrading can make clients that use the newer API versions "
    "fail; pass --allow-downgrade to confirm (nothing was changed)"
)
DISABLE_REFUSED = (
    "refusing to disable: disabling withdraws the API versions a feature gates, so "
    "clients that use them can fail; pass --allow-downgrade to confirm (nothing was changed)"
)


class CliError(Exception):
    """A failure reported as one ``error: ...`` line on stderr with an exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def feature_level(text: str) -> tuple[str, int]:
    """argparse type of ``--feature NAME=LEVEL``."""
    name, sep, level = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise argparse.ArgumentTypeError(
            f"expected NAME=LEVEL (for example group.version=1), got {text!r}"
        )
    try:
        value = int(level)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"the level of {name} must be an integer, got {level!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"the level of {name} must be >= 0, got {value}")
    return name, value


def feature_name(text: str) -> str:
    """argparse type of ``--feature NAME`` (describe, disable)."""
    name = text.strip()
    if not name or "=" in name:
        raise argparse.ArgumentTypeError(
            f"expected a feature NAME without a level (for example group.version), got {text!r}"
        )
    return name


def zookeeper_auth(text: str) -> str:
    user, sep, _ = text.partition(":")
    if not sep or not user:
        raise argparse.ArgumentTypeError("expected USER:PASSWORD (ZooKeeper digest auth)")
    return text


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def _zookeeper_security_options(group: argparse._ArgumentGroup, *, top_level: bool) -> None:
    """TLS and SASL towards ZooKeeper, as the gateway's [zookeeper_tls] / zookeeper_sasl."""
    group.add_argument(
        "--zookeeper-sasl",
        metavar="USER:PASSWORD",
        type=zookeeper_auth,
        default=_default(os.environ.get(ZOOKEEPER_SASL_ENV) or None, top_level),
        help=f"authenticate with SASL DIGEST-MD5 (server JAAS DigestLoginModule) "
        f"[${ZOOKEEPER_SASL_ENV}]",
    )
    group.add_argument(
        "--zookeeper-tls",
        action="store_true",
        default=_default(False, top_level),
        help="connect to ZooKeeper's secureClientPort over TLS",
    )
    group.add_argument(
        "--zookeeper-tls-ca",
        metavar="PEM",
        default=_default(None, top_level),
        help="CA that signs ZooKeeper's certificate",
    )
    group.add_argument(
        "--zookeeper-tls-cert",
        metavar="PEM",
        default=_default(None, top_level),
        help="client certificate (mutual TLS)",
    )
    group.add_argument(
        "--zookeeper-tls-key",
        metavar="PEM",
        default=_default(None, top_level),
        help="its private key",
    )
    group.add_argument(
        "--zookeeper-tls-no-check-hostname",
        dest="zookeeper_tls_check_hostname",
        action="store_false",
        default=_default(True, top_level),
        help="verify ZooKeeper's certificate chain but not the name in it",
    )


def _default(value: object, top_level: bool) -> object:
    """The default of an option accepted before and after the command word.

    Only the top-level parser has the real default: the subcommand's copy has none
    (SUPPRESS), so the subparser, whose namespace argparse copies over the top-level one,
    sets the attribute only when the option is given after the command word, and that
    position wins when both are given.
    """
    return value if top_level else argparse.SUPPRESS


def _zookeeper_tls(args: argparse.Namespace) -> ZooKeeperTls | None:
    tls_files = (args.zookeeper_tls_ca, args.zookeeper_tls_cert, args.zookeeper_tls_key)
    if not args.zookeeper_tls:
        if any(tls_files):
            raise CliError(EXIT_USAGE, "--zookeeper-tls-* options need --zookeeper-tls")
        return None
    if (args.zookeeper_tls_cert is None) != (args.zookeeper_tls_key is None):
        raise CliError(EXIT_USAGE, "pass --zookeeper-tls-cert and --zookeeper-tls-key together")
    for path in tls_files:
        if path is not None and not os.path.isfile(path):
            raise CliError(EXIT_USAGE, f"TLS file {path} does not exist")
    return ZooKeeperTls(*tls_files, check_hostname=args.zookeeper_tls_check_hostname)


def _zookeeper_options(group: argparse._ArgumentGroup, *, top_level: bool = False) -> None:
    """--zookeeper and its companions, accepted before and after the command word (as
    --bootstrap-server is: ``featurectl --zookeeper zk:2181 describe``)."""
    group.add_argument(
        "--zookeeper",
        metavar="CONNECT",
        default=_default(os.environ.get(ZOOKEEPER_ENV) or None, top_level),
        help=f"ZooKeeper connect string host:port[,host:port] [${ZOOKEEPER_ENV}]",
    )
    group.add_argument(
        "--chroot",
        default=_default(DEFAULT_CHROOT, top_level),
        help=f"the gateways' ZooKeeper path (gateway config 'zookeeper' chroot) [{DEFAULT_CHROOT}]",
    )
    group.add_argument(
        "--zookeeper-auth",
        metavar="USER:PASSWORD",
        type=zookeeper_auth,
        default=_default(os.environ.get(ZOOKEEPER_AUTH_ENV) or None, top_level),
        help=f"authenticate with ZooKeeper's digest scheme [${ZOOKEEPER_AUTH_ENV}]",
    )
    _zookeeper_security_options(group, top_level=top_level)
    group.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=positive_seconds,
        default=_default(DEFAULT_TIMEOUT_S, top_level),
        help=f"how long to wait for the ZooKeeper or gateway connection [{DEFAULT_TIMEOUT_S:g}]",
    )


def _common_options(outputs: tuple[str, ...] = ("table", "json")) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("ZooKeeper and output")
    _zookeeper_options(group)
    group.add_argument("--output", choices=list(outputs), default="table")
    _kafka_options(common.add_argument_group("Kafka protocol (instead of --zookeeper)"))
    return common


def _kafka_options(group: argparse._ArgumentGroup, *, top_level: bool = False) -> None:
    """--bootstrap-server / --command-config, accepted before and after the command word.

    Kafka's tools take them first (``kafka-features.sh --bootstrap-server X describe``).
    Both parsers define them; the subcommand's copy has no default (SUPPRESS), so a value
    given before the command word is not overwritten by the subparser's default.
    """
    default = None if top_level else argparse.SUPPRESS
    group.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=default,
        help="talk to this gateway over the Kafka protocol (ApiVersions, UpdateFeatures)",
    )
    group.add_argument(
        "--command-config",
        metavar="FILE",
        default=default,
        help="Kafka client properties for --bootstrap-server: security.protocol, ssl.*, "
        "sasl.* (the keys honoured are listed in each command's --help)",
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
    parser.set_defaults(handler=_update, parser=parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="featurectl",
        description=wrap(
            "Operate kafka-gateway: cluster-wide finalized feature levels (KIP-584), kept in "
            "ZooKeeper, and the broker software behind each gateway (KIP-885)."
        ),
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_text("featurectl"))
    _zookeeper_options(
        parser.add_argument_group("ZooKeeper (also accepted after the command word, which wins)"),
        top_level=True,
    )
    _kafka_options(
        parser.add_argument_group("Kafka protocol (also accepted after the command word)"),
        top_level=True,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = _common_options()

    describe = add_command(
        commands,
        "describe",
        parents=[_common_options(DESCRIBE_OUTPUTS)],
        help_text="show supported and finalized feature levels and the live gateways",
        description=(
            "Show, per feature, the levels every live gateway can serve, the "
            "finalized level and its epoch, and which gateways hold a feature back; then the "
            "live gateways (id, listener, upstream, broker software, gateway version)."
        ),
        epilog=_DESCRIBE_EPILOG,
    )
    describe.add_argument(
        "--feature",
        action="append",
        type=feature_name,
        metavar="NAME",
        help="only this feature (repeat for several)",
    )
    describe.set_defaults(handler=_describe, parser=describe)

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
    mapping.set_defaults(handler=_version_mapping, parser=mapping)

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
    dependencies.set_defaults(handler=_feature_dependencies, parser=dependencies)

    brokers = add_command(
        commands,
        "brokers",
        help_text="show the broker software name/version each gateway reports (KIP-885)",
        description=(
            "Ask each gateway for ApiVersions and print the BrokerSoftwareName/Version "
            "tagged fields it adds."
        ),
        epilog="examples:\n  featurectl brokers --bootstrap gw-0:9092\n"
        "  featurectl --bootstrap-server gw-0:9092 brokers\n\n"
        + wrap(
            "--bootstrap-server: the addresses are the brokers a Metadata request through "
            "it lists, as a Kafka client sees them (through a gateway: the gateway "
            "listeners it advertises)."
        ),
    )
    brokers.add_argument(
        "--bootstrap",
        action="append",
        metavar="HOST:PORT",
        help="a gateway address (repeat for several)",
    )
    _kafka_options(brokers.add_argument_group("Kafka protocol (instead of --bootstrap)"))
    brokers.add_argument("--output", choices=["table", "json"], default="table")
    brokers.add_argument(
        "--name-tag", type=int, default=10000, help="tag of BrokerSoftwareName [10000]"
    )
    brokers.add_argument(
        "--version-tag", type=int, default=10001, help="tag of BrokerSoftwareVersion [10001]"
    )
    brokers.set_defaults(handler=_brokers, parser=brokers)
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


# --------------------------------------------------------------------------------------
# ZooKeeper
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _store(args: argparse.Namespace) -> Iterator[FeatureStore]:
    """A connected FeatureStore; kazoo failures become one-line ``CliError``s."""
    where = f"ZooKeeper at {args.zookeeper}"
    try:
        chroot = normalize_chroot(args.chroot)
        client = make_client(
            args.zookeeper,
            auth=args.zookeeper_auth,
            tls=_zookeeper_tls(args),
            sasl=args.zookeeper_sasl,
        )
    except ValueError as exc:
        raise CliError(EXIT_USAGE, f"invalid --zookeeper/--chroot: {exc}") from None
    # kazoo logs every failed connection attempt; Python's last-resort handler would
    # print those warnings to stderr, burying the one line that says what went wrong.
    logging.getLogger("kazoo").addHandler(logging.NullHandler())
    # A chroot in the connect string that does not exist yet is fine: it is created on
    # the first write, like our own --chroot.
    warnings.filterwarnings("ignore", message="No chroot path exists")
    try:
        client.start(timeout=args.timeout)
    except KazooTimeoutError:
        raise CliError(
            EXIT_USAGE,
            f"cannot connect to {where} within {args.timeout:g}s "
            f"(check --zookeeper / ${ZOOKEEPER_ENV} and that ZooKeeper is running)",
        ) from None
    except AuthFailedError:
        raise CliError(EXIT_USAGE, f"{where} rejected the --zookeeper-auth credentials") from None
    try:
        yield FeatureStore(client, chroot, auth=args.zookeeper_auth)
    except NoAuthError:
        if args.zookeeper_auth:
            hint = "the --zookeeper-auth user/password is not the one it was created with"
        else:
            hint = f"pass --zookeeper-auth USER:PASSWORD (or set ${ZOOKEEPER_AUTH_ENV})"
        raise CliError(
            EXIT_REJECTED,
            f"not authorized: {where} refused access to {chroot}/feature, which only the "
            f"digest user that created it may change; {hint}",
        ) from None
    except (ConnectionLoss, ConnectionClosedError, SessionExpiredError):
        raise CliError(
            EXIT_USAGE,
            f"lost the connection to {where}; a write in flight may or may not have been "
            f"applied: check with {shell_command('featurectl')} describe",
        ) from None
    except ZNodeError as exc:
        raise CliError(EXIT_REJECTED, f"{chroot}/feature is unreadable: {exc}") from None
    except KazooException as exc:
        raise CliError(EXIT_REJECTED, f"{where}: {type(exc).__name__}: {exc}") from None
    finally:
        client.stop()
        client.close()


def _console() -> Console:
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


# --------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------


def _describe(args: argparse.Namespace) -> int:
    if args.bootstrap_server is not None:
        with _kafka(args) as client:
            described = client.describe()
            # As Kafka's tools: log in before anything else, so bad credentials show.
            client.authenticate()
        finalized = described.finalized
        # The answering gateway stands in for "every live gateway": over the protocol it
        # is the only one whose support featurectl can see.
        answering = [_as_registration(args.bootstrap_server, described)]
    else:
        with _store(args) as store:
            finalized = store.read()
            registrations = store.registrations()
            gateway_ids = store.paths.gateway_ids
        answering = registrations
    rows = describe_rows(finalized, answering, load_catalogue())
    if args.feature:
        _check_feature_names(args.feature, {row.feature for row in rows})
        rows = [row for row in rows if row.feature in args.feature]
    if args.output == "kafka":
        for line in kafka_describe_lines(rows, answering):
            print(line)
        return EXIT_OK
    if args.bootstrap_server is not None:
        return _print_described_by_gateway(args, finalized, rows, described)
    if args.output == "json":
        print(json.dumps(describe_document(finalized, rows, registrations), indent=2))
        return EXIT_OK
    console = _console()
    console.print(features_table(rows))
    console.print()
    if registrations:
        console.print(f"Live gateways ({len(registrations)}):")
        console.print(gateways_table(registrations))
    else:
        console.print(f"No live gateway is registered under {gateway_ids}.")
    return EXIT_OK


def _check_feature_names(names: Iterable[str], known: Collection[str]) -> None:
    """Refuse --feature names nothing knows, as a usage error (exit 2), naming the
    closest known one: a misspelt name is a typo to fix, not a request a gateway should
    judge (and "not supported" from it would not say which name was meant).

    ``known``: the built-in catalogue, every gateway's supported features and the
    finalized levels, so a feature finalized but since dropped can still be disabled.
    """
    unknown = [name for name in dict.fromkeys(names) if name not in known]
    if not unknown:
        return
    guesses = []
    for name in unknown:
        # Above difflib's 0.6: every name ends in ".version", which alone makes
        # no.such.version look like share.version.
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        guesses.append(f"{name} (did you mean {close[0]}?)" if close else name)
    raise CliError(
        EXIT_USAGE,
        f"unknown feature {', '.join(guesses)}; known features: {', '.join(sorted(known))}",
    )


def _known_features(finalized: Finalized, *supported: Mapping[str, tuple[int, int]]) -> set[str]:
    """What an update's --feature may name: as describe's rows (catalogue, gateways,
    finalized levels)."""
    known = set(load_catalogue()) | set(finalized.levels)
    for ranges in supported:
        known |= set(ranges)
    return known


def _feature_names(args: argparse.Namespace) -> list[str]:
    """The names --feature gave (NAME for disable, NAME=LEVEL otherwise); none with
    --release-version, whose names come from the release table."""
    if not args.feature:
        return []
    return [item if isinstance(item, str) else item[0] for item in args.feature]


def _as_registration(address: str, described: Described) -> Registration:
    name, version = described.broker_software or ("unknown", "unknown")
    return Registration(
        gateway_id=address,
        listener=address,
        upstream="",
        features=described.supported,
        broker_software_name=name,
        broker_software_version=version,
    )


def _print_described_by_gateway(
    args: argparse.Namespace, finalized: Finalized, rows: list[FeatureRow], described: Described
) -> int:
    """describe --bootstrap-server: the same table and JSON keys; instead of the live
    gateways (only ZooKeeper knows them all), the gateway that answered."""
    name, version = described.broker_software or ("unknown", "unknown")
    software = "unknown" if name == version == "unknown" else f"{name} {version}"
    if args.output == "json":
        document = describe_document(finalized, rows, [])
        document["answered_by"] = {"bootstrap_server": args.bootstrap_server, "broker": software}
        print(json.dumps(document, indent=2))
        return EXIT_OK
    console = _console()
    console.print(features_table(rows))
    console.print()
    console.print(
        f"Answered by {args.bootstrap_server} (broker software: {software}). Supported "
        "levels are that gateway's own; describe --zookeeper shows every live gateway."
    )
    return EXIT_OK


def _operator(args: argparse.Namespace) -> dict[str, object]:
    """Who changes the levels, for the audit line: the ZooKeeper identity when there is
    one (what ACLs judge), else the operating-system user; from this host."""
    user = getpass.getuser()
    credentials = args.zookeeper_auth or getattr(args, "zookeeper_sasl", None)
    principal = f"zookeeper:{credentials.partition(':')[0]}" if credentials else f"os:{user}"
    return {
        "principal": principal,
        "address": socket.gethostname(),
        "via": "featurectl",
        "os_user": user,
    }


def _servable(finalized: Finalized, *supported: Mapping[str, tuple[int, int]]) -> set[str]:
    """Features --release-version may set: finalized ones, or ones a gateway can serve."""
    known = set(finalized.levels)
    for ranges in supported:
        known |= {name for name, (_, high) in ranges.items() if high >= 1}
    return known


def _requested_updates(
    args: argparse.Namespace, finalized: Finalized, known: set[str]
) -> list[FeatureUpdate]:
    """The FeatureUpdates the command line asks for, given the levels read.

    ``--release-version`` needs them: it moves only the features whose release level
    differs (notes on stderr say which were skipped and why).
    """
    unsafe = getattr(args, "unsafe", False)
    if args.command == "disable":
        return feature_updates("disable", [(name, 0) for name in args.feature], unsafe=unsafe)
    if args.release_version is None:
        return feature_updates(args.command, args.feature, unsafe=unsafe)
    levels = release_table().levels(args.release_version)
    wanted, notes = release_updates(levels, known, dict(finalized.levels), args.command)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return feature_updates(args.command, sorted(wanted.items()), unsafe=unsafe)


def _nothing_to_change(args: argparse.Namespace) -> int:
    message = (
        f"nothing to change: no feature the gateways serve is below (upgrade) or above "
        f"(downgrade) its Apache Kafka {args.release_version} level"
    )
    if args.output == "json":
        print(json.dumps({"command": args.command, "ok": True, "changes": []}, indent=2))
    print(message, file=sys.stderr)
    return EXIT_OK


def _update(args: argparse.Namespace) -> int:
    if args.command != "finalize" and not args.allow_downgrade:
        refused = DOWNGRADE_REFUSED if args.command == "downgrade" else DISABLE_REFUSED
        raise CliError(EXIT_REJECTED, refused)
    if args.bootstrap_server is not None:
        outcome = _update_via_kafka(args)
        if outcome is None:
            return _nothing_to_change(args)
    else:
        # The audit line (features.changed) goes to stderr as JSON, apart from the output.
        configure_logging("json", "info")
        with _store(args) as store:
            finalized = store.read()
            supported = store.supported_by_gateway()
            _check_feature_names(
                _feature_names(args), _known_features(finalized, *supported.values())
            )
            known = _servable(finalized, *supported.values())
            updates = _requested_updates(args, finalized, known)
            if not updates:
                return _nothing_to_change(args)
            plan = plan_updates(args.command, finalized, supported, updates)
            outcome = Outcome(plan, dry_run=args.dry_run)
            if plan.ok and not args.dry_run:
                try:
                    new_epoch = store.write(
                        plan.target,
                        expected_epoch=finalized.epoch,
                        old=finalized.levels,
                        who=_operator(args),
                    )
                    outcome = Outcome(plan, new_epoch=new_epoch)
                except EpochConflict as conflict:
                    outcome = Outcome(plan, conflict=conflict)
    out, err = outcome_lines(outcome)
    for line in err:
        print(line, file=sys.stderr)
    if args.output == "json":
        print(json.dumps(outcome_document(outcome), indent=2))
    else:
        for line in out:
            print(line)
    return EXIT_OK if outcome.ok else EXIT_REJECTED


def _update_via_kafka(args: argparse.Namespace) -> Outcome | None:
    """finalize/downgrade/disable through a gateway; None when there is nothing to do.

    Validation first (UpdateFeatures v1 ValidateOnly, or locally against the gateway's
    advertised support from a v0-only peer), so that a refusal changes nothing and
    --dry-run is the gateway's own verdict. The write then uses v2 where offered (the
    gateway applies it all or nothing), else v1/v0 (Kafka applies the valid items of
    those; the validation just before makes that all of them).
    """
    with _kafka(args) as client:
        described = client.describe()
        client.authenticate()
        finalized = described.finalized
        _check_feature_names(_feature_names(args), _known_features(finalized, described.supported))
        known = _servable(finalized, described.supported)
        updates = _requested_updates(args, finalized, known)
        if not updates:
            return None
        versions = update_features_range(described)
        if versions is None:
            raise CliError(
                EXIT_REJECTED,
                f"{args.bootstrap_server} does not offer UpdateFeatures (key 57); use --zookeeper",
            )
        if versions[1] >= 1:
            results, _, _ = client.update_features(1, updates, validate_only=True)
        else:
            gateways = {args.bootstrap_server: described.supported}
            results = list(validate_updates(finalized.levels, gateways, updates).results)
        plan = answered_plan(args.command, finalized, updates, results)
        if not plan.ok or args.dry_run:
            return Outcome(plan, dry_run=args.dry_run)
        results, _, _ = client.update_features(min(versions[1], 2), updates)
        written = answered_plan(args.command, finalized, updates, results)
        if not written.ok:
            return Outcome(written)
        # The gateway answers once it serves the new epoch (as Kafka does), so a fresh
        # ApiVersions on this connection reports it.
        return Outcome(written, new_epoch=client.describe().finalized.epoch)


@contextlib.contextmanager
def _kafka(args: argparse.Namespace) -> Iterator[KafkaClient]:
    """A connected KafkaClient; connection and --command-config failures exit 2."""
    config = _client_config(args)
    try:
        with KafkaClient(args.bootstrap_server, config, args.timeout) as client:
            yield client
    except KafkaClientError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None


def _client_config(args: argparse.Namespace) -> ClientConfig:
    """--command-config's settings (plaintext without it); an unusable file exits 2."""
    if args.command_config is None:
        return ClientConfig()
    try:
        config = load_command_config(args.command_config)
    except CommandConfigError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None
    if config.unknown_keys:
        print(
            f"warning: --command-config keys featurectl ignores: {', '.join(config.unknown_keys)}",
            file=sys.stderr,
        )
    return config


def _version_mapping(args: argparse.Namespace) -> int:
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


def _feature_dependencies(args: argparse.Namespace) -> int:
    table = release_table()
    known = {name for levels in table.releases.values() for name in levels}
    _check_feature_names([name for name, _ in args.feature], known)
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


def _brokers(args: argparse.Namespace) -> int:
    from gateway.interceptors.api_versions import SoftwareTags

    from .brokers import advertised_brokers, describe_brokers

    if (args.bootstrap is None) == (args.bootstrap_server is None):
        args.parser.error("pass --bootstrap HOST:PORT (repeatable) or --bootstrap-server HOST:PORT")
    config = _client_config(args)
    addresses = args.bootstrap
    if args.bootstrap_server is not None:
        try:
            addresses = advertised_brokers(args.bootstrap_server, config)
        except (KafkaClientError, ValueError) as exc:
            raise CliError(EXIT_USAGE, str(exc)) from None
    tags = SoftwareTags(args.name_tag, args.version_tag)
    rows = describe_brokers(addresses, tags, config=config)
    if args.output == "json":
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        print(f"{'Gateway':<28} {'BrokerSoftwareName':<22} {'BrokerSoftwareVersion':<22}")
        for r in rows:
            if r.error:
                print(f"{r.address:<28} error: {r.error}")
            else:
                print(f"{r.address:<28} {r.name or '-':<22} {r.version or '-':<22}")
    return EXIT_USAGE if any(r.error for r in rows) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
