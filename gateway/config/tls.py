"""TLS towards clients ([tls]) and towards the broker ([upstream_tls]), and what the
gateway reads of the SASL logins it passes through ([sasl]).

Whether the files load, and whether they fit together, is checked in ``_validate``.
"""

# setting() is a dataclasses.field with metadata; ruff only knows field() itself as one.
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..principal import PrincipalRuleError, parse_rules
from ._declare import ConfigError, setting

ClientAuth = Literal["none", "requested", "required"]


def _rules(key: str, value: str) -> None:
    try:
        parse_rules(value)
    except PrincipalRuleError as exc:
        raise ConfigError("tls.principal_mapping_rules", str(exc)) from None


def _claim(key: str, value: str) -> None:
    if not value.strip():
        raise ConfigError(key, "must name a claim of the token (Kafka's default: sub)")


@dataclass(frozen=True)
class Tls:
    """TLS."""

    __slots__ = ()

    tls_cert: str | None = setting(
        None,
        table="tls",
        name="cert",
        flag="--tls-cert",
        metavar="PEM",
        default_means="plaintext towards clients",
        example="/etc/kafka-gateway/tls/gateway.pem",
        see="tls-sasl-sni.md",
        why="the PEM certificate chain clients see; set, TLS (1.2+) towards clients is on "
        "(clients use security.protocol=SSL, or SASL_SSL: SASL passes through)",
    )
    tls_key: str | None = setting(
        None,
        table="tls",
        name="key",
        flag="--tls-key",
        metavar="PEM",
        default_means="in the tls_cert file",
        example="/etc/kafka-gateway/tls/gateway-key.pem",
        why="its unencrypted PEM private key",
    )
    tls_ca: str | None = setting(
        None,
        table="tls",
        name="ca",
        flag="--tls-ca",
        metavar="PEM",
        example="/etc/kafka-gateway/tls/clients-ca.pem",
        why="the CA that signs client certificates (needs tls_client_auth)",
    )
    tls_client_auth: ClientAuth = setting(
        "none",
        table="tls",
        name="client_auth",
        flag="--tls-client-auth",
        why='"requested": verify a certificate when the client sends one; "required": '
        "refuse clients without one; both need tls_ca",
    )
    tls_principal_mapping_rules: str = setting(
        "DEFAULT",
        table="tls",
        name="principal_mapping_rules",
        check=_rules,
        example="RULE:^CN=([^,]+),.*$/$1/L,DEFAULT",
        why="Kafka's ssl.principal.mapping.rules: how a client certificate's subject "
        'becomes the connection\'s principal ("User:" + the result)',
    )
    sasl_oauthbearer_sub_claim_name: str = setting(
        "sub",
        table="sasl",
        name="oauthbearer_sub_claim_name",
        check=_claim,
        see="tls-sasl-sni.md#who-logged-in-sasl-principals",
        why="Kafka's sasl.oauthbearer.sub.claim.name: the claim of an OAUTHBEARER token "
        'that names who logged in (the principal is "User:" + it)',
    )
    upstream_tls: bool = setting(
        False,
        table="upstream_tls",
        name="enabled",
        flag="--upstream-tls",
        why="TLS towards the broker",
    )
    upstream_tls_ca: str | None = setting(
        None,
        table="upstream_tls",
        name="ca",
        flag="--upstream-tls-ca",
        metavar="PEM",
        default_means="the system's trusted CAs",
        example="/etc/kafka-gateway/tls/broker-ca.pem",
        why="the CA that signs the broker's certificate",
    )
    upstream_tls_cert: str | None = setting(
        None,
        table="upstream_tls",
        name="cert",
        flag="--upstream-tls-cert",
        metavar="PEM",
        example="/etc/kafka-gateway/tls/gw-client.pem",
        why="a client certificate for the broker (mutual TLS)",
    )
    upstream_tls_key: str | None = setting(
        None,
        table="upstream_tls",
        name="key",
        flag="--upstream-tls-key",
        metavar="PEM",
        default_means="in the upstream_tls_cert file",
        example="/etc/kafka-gateway/tls/gw-client-key.pem",
        why="its private key",
    )
    upstream_tls_server_hostname: str | None = setting(
        None,
        table="upstream_tls",
        name="server_hostname",
        flag="--upstream-tls-server-hostname",
        metavar="NAME",
        default_means="the upstream host",
        example="kafka-0.internal",
        why="sent as SNI, and the name the broker's certificate must hold",
    )
    upstream_tls_check_hostname: bool = setting(
        True,
        table="upstream_tls",
        name="check_hostname",
        flag="--upstream-tls-check-hostname",
        why="compare the broker certificate's name (the chain is always verified)",
    )
