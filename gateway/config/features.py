"""ZooKeeper and feature gating (KIP-584): where finalized feature levels live, how the
gateway reaches them, and who may change them through it.

The top level, [features] and [zookeeper_tls] of the TOML file.
"""

# setting() is a dataclasses.field with metadata; ruff only knows field() itself as one.
# ruff: noqa: RUF009

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Annotated, Any

from ..features.catalogue import CatalogueError, load_catalogue
from ._declare import ConfigError, Seconds, Shape, positive, setting, user_password

Principals = Annotated[
    tuple[str, ...], Shape("a list of 'User:NAME' principals", item_prefix="User:")
]


def _chroot(key: str, value: str) -> None:
    if value.strip("/") == "":
        raise ConfigError(key, "must name a path below '/', e.g. /kafka-gateway")


def _gateway_id(key: str, value: str | None) -> None:
    if value is not None and (not value or "/" in value or value in (".", "..")):
        raise ConfigError(key, f"must be a non-empty name without '/', got {value!r}")


def _catalogue(key: str, value: Any) -> None:
    try:
        load_catalogue(value)
    except CatalogueError as exc:
        raise ConfigError("features.catalogue", str(exc)) from None


def _cidrs(value: str) -> object:
    return ipaddress.ip_network(value, strict=False)


Cidrs = Annotated[tuple[str, ...], Shape("a list of CIDRs", item_parse=_cidrs)]


@dataclass(frozen=True)
class Features:
    """ZooKeeper and feature gating."""

    __slots__ = ()

    zookeeper: str | None = setting(
        None,
        flag="--zookeeper",
        why="the ZooKeeper holding finalized feature levels; None turns feature gating off "
        "(no versions withheld, nothing finalized); the embedded default starts one",
    )
    zookeeper_chroot: str = setting(
        "/kafka-gateway",
        flag="--zookeeper-chroot",
        check=_chroot,
        why="the ZooKeeper path holding feature and gateways/ids",
    )
    zookeeper_auth: str | None = setting(
        None,
        check=user_password,
        why='"user:password" for ZooKeeper digest auth (only when ACLs restrict reads)',
    )
    zookeeper_sasl: str | None = setting(
        None,
        check=user_password,
        why='"user:password" for SASL DIGEST-MD5 to ZooKeeper (the server\'s JAAS '
        "DigestLoginModule); zookeeper_auth is the other kind, digest ACL credentials",
    )
    zookeeper_timeout_s: Seconds = setting(
        10.0, check=positive, why="the connect timeout at startup, and the session timeout"
    )
    zookeeper_tls: bool = setting(
        False,
        table="zookeeper_tls",
        name="enabled",
        why="TLS to ZooKeeper (its secureClientPort)",
    )
    zookeeper_tls_ca: str | None = setting(
        None,
        table="zookeeper_tls",
        name="ca",
        why="the CA that signs ZooKeeper's certificate; None: the system's trusted CAs",
    )
    zookeeper_tls_cert: str | None = setting(
        None,
        table="zookeeper_tls",
        name="cert",
        why="a client certificate for ZooKeeper (mutual TLS), with zookeeper_tls_key",
    )
    zookeeper_tls_key: str | None = setting(
        None, table="zookeeper_tls", name="key", why="its private key"
    )
    zookeeper_tls_check_hostname: bool = setting(
        True,
        table="zookeeper_tls",
        name="check_hostname",
        why="compare ZooKeeper's certificate name with its host",
    )
    adopt_broker_features: bool = setting(
        True,
        flag="--adopt-broker-features",
        why="a fleet whose ZooKeeper holds no feature znode yet takes the levels its "
        "brokers finalized (once, audited); false: start with nothing finalized",
    )
    gateway_id: str | None = setting(
        None,
        flag="--gateway-id",
        check=_gateway_id,
        why='this gateway\'s registration id under <chroot>/gateways/ids; None: "host:port" '
        "of the advertised listener",
    )
    features_catalogue: str | None = setting(
        None,
        table="features",
        name="catalogue",
        flag="--features-catalogue",
        check=_catalogue,
        why="the feature catalogue (TOML); None: the built-in one (gateway/data/features.toml)",
    )
    features_update_allowed_from: Cidrs = setting(
        (),
        table="features",
        name="update_allowed_from",
        why="client networks whose UpdateFeatures the gateway executes; all others get "
        "CLUSTER_AUTHORIZATION_FAILED; empty: refuse everyone (use featurectl)",
    )
    features_update_allowed_principals: Principals = setting(
        (),
        table="features",
        name="update_allowed_principals",
        why='principals ("User:...") allowed to send UpdateFeatures; with '
        "update_allowed_from as well, both must match",
    )
