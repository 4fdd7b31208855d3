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
        metavar="CONNECT",
        default_means="feature gating off (no versions withheld, nothing finalized); the "
        "embedded default starts one",
        example="127.0.0.1:2181",
        see="features.md",
        why="the ZooKeeper connect string (host:port[,host:port...]) holding finalized "
        "feature levels (KIP-584)",
    )
    zookeeper_chroot: str = setting(
        "/kafka-gateway",
        flag="--zookeeper-chroot",
        metavar="PATH",
        check=_chroot,
        why="the ZooKeeper path holding feature and gateways/ids",
    )
    zookeeper_auth: str | None = setting(
        None,
        check=user_password,
        example="gateway:secret",
        why='"user:password" for ZooKeeper digest auth (only when ACLs restrict reads)',
    )
    zookeeper_sasl: str | None = setting(
        None,
        check=user_password,
        example="gateway:secret",
        see="tls-sasl-sni.md#zookeeper-over-tls-with-sasl",
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
        default_means="the system's trusted CAs",
        example="/etc/kafka-gateway/tls/zk-ca.pem",
        why="the CA that signs ZooKeeper's certificate",
    )
    zookeeper_tls_cert: str | None = setting(
        None,
        table="zookeeper_tls",
        name="cert",
        example="/etc/kafka-gateway/tls/zk-client.pem",
        why="a client certificate for ZooKeeper (mutual TLS), with zookeeper_tls_key",
    )
    zookeeper_tls_key: str | None = setting(
        None,
        table="zookeeper_tls",
        name="key",
        example="/etc/kafka-gateway/tls/zk-client-key.pem",
        why="its private key",
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
        see="features.md#a-fresh-fleet-adopts-the-brokers-levels",
        why="a fleet whose ZooKeeper holds no feature znode yet takes the levels its "
        "brokers finalized (once, audited); false: start with nothing finalized",
    )
    gateway_id: str | None = setting(
        None,
        flag="--gateway-id",
        metavar="ID",
        check=_gateway_id,
        default_means='"host:port" of the advertised listener',
        example="gateway-0",
        why="this gateway's registration id under <chroot>/gateways/ids",
    )
    features_catalogue: str | None = setting(
        None,
        table="features",
        name="catalogue",
        flag="--features-catalogue",
        metavar="FILE",
        check=_catalogue,
        default_means="the built-in one, gateway/data/features.toml (Kafka 4.x's levels)",
        example="/etc/kafka-gateway/features.toml",
        why="the feature catalogue (TOML): which API versions each feature level enables",
    )
    features_update_allowed_from: Cidrs = setting(
        (),
        table="features",
        name="update_allowed_from",
        example=("10.0.0.0/8", "::1/128"),
        why="client networks whose UpdateFeatures the gateway executes; all others get "
        "CLUSTER_AUTHORIZATION_FAILED; empty: refuse everyone (use featurectl)",
    )
    features_update_allowed_principals: Principals = setting(
        (),
        table="features",
        name="update_allowed_principals",
        example=("User:ops",),
        why='principals ("User:...") allowed to send UpdateFeatures; with '
        "update_allowed_from as well, both must match",
    )
