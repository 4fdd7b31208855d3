"""featurectl's shared command-line pieces: argument types, the connection options every
feature command takes (ZooKeeper, or the Kafka protocol with ``--bootstrap-server``),
and the help text that explains them.

The connection options are accepted before and after the command word, as Kafka's tools
take ``--bootstrap-server`` first (``kafka-features.sh --bootstrap-server X describe``).
"""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Collection, Iterable

from gateway.features.store import DEFAULT_CHROOT, ZOOKEEPER_ENV

from .client_config import SUPPORTED_KEYS
from .exits import EXIT_USAGE, CliError

ZOOKEEPER_AUTH_ENV = "KAFKA_GATEWAY_ZOOKEEPER_AUTH"
ZOOKEEPER_SASL_ENV = "KAFKA_GATEWAY_ZOOKEEPER_SASL"
DEFAULT_TIMEOUT_S = 10.0

KAFKA_CONNECTION = "\n".join(
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

CONNECTION = f"""\
connection:
  --zookeeper defaults to ${ZOOKEEPER_ENV},
  --zookeeper-auth to ${ZOOKEEPER_AUTH_ENV}.
  A feature znode created with --zookeeper-auth USER:PASSWORD (ZooKeeper digest) is
  writable only by that user (everyone may read it); writing it without those
  credentials fails with "not authorized" and exit code 1."""


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


def zookeeper_options(group: argparse._ArgumentGroup, *, top_level: bool = False) -> None:
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


def common_options(outputs: tuple[str, ...] = ("table", "json")) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("ZooKeeper and output")
    zookeeper_options(group)
    group.add_argument("--output", choices=list(outputs), default="table")
    kafka_options(common.add_argument_group("Kafka protocol (instead of --zookeeper)"))
    return common


def kafka_options(group: argparse._ArgumentGroup, *, top_level: bool = False) -> None:
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


def check_feature_names(names: Iterable[str], known: Collection[str]) -> None:
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
