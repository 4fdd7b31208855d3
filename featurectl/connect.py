"""The connections a feature command opens, as its options ask: a FeatureStore on
ZooKeeper, or a KafkaClient to one gateway (``--bootstrap-server``). Every failure to
connect, authenticate or read becomes one ``CliError`` line with its exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator

from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from gateway.commands import shell_command
from gateway.features.store import (
    ZOOKEEPER_ENV,
    FeatureStore,
    ZooKeeperTls,
    make_client,
    normalize_chroot,
)
from gateway.features.znode import ZNodeError

from .client_config import ClientConfig, CommandConfigError, load_command_config
from .exits import EXIT_REJECTED, EXIT_USAGE, CliError
from .kafka import KafkaClient, KafkaClientError
from .options import ZOOKEEPER_AUTH_ENV


@contextlib.contextmanager
def feature_store(args: argparse.Namespace) -> Iterator[FeatureStore]:
    """A connected FeatureStore; kazoo failures become one-line ``CliError``s."""
    where = f"ZooKeeper at {args.zookeeper}"
    try:
        chroot = normalize_chroot(args.chroot)
        client = make_client(
            args.zookeeper,
            auth=args.zookeeper_auth,
            tls=zookeeper_tls(args),
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


def zookeeper_tls(args: argparse.Namespace) -> ZooKeeperTls | None:
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


@contextlib.contextmanager
def kafka_client(args: argparse.Namespace) -> Iterator[KafkaClient]:
    """A connected KafkaClient; connection and --command-config failures exit 2."""
    config = client_config(args)
    try:
        with KafkaClient(args.bootstrap_server, config, args.timeout) as client:
            yield client
    except KafkaClientError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None


def client_config(args: argparse.Namespace) -> ClientConfig:
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
