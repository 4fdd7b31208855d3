"""Who logged in, applied to a connection: what a SASL login that ended (the sans-I/O
``gateway.protocol._sasl_login``) changes of the connection's principal, its registry
entry (/connections, the request log), its identity's record (/clients) and the log.

The principal is the one Kafka would use: on a SASL listener the login's, also where
clients present a TLS certificate too (SASL_SSL), so a login replaces the certificate's
principal. An accepted login makes it ``User:`` + the name the login claimed; a refused
one, or one whose principal the gateway cannot read (GSSAPI), leaves none. A KIP-368
re-authentication that changes who is logged in is a warning. Names only: no token,
password or proof reaches this module.
"""

from __future__ import annotations

from typing import Protocol

from ..client_info import ClientInfo
from ..clients import ConnectionRegistry
from ..observability.logging import RateLimitedLogger, get_logger
from ..principal import PRINCIPAL_TYPE
from ..protocol import AUTHENTICATED, FAILED, SaslLogin

# The connection's logger names: these lines are the connection's.
log = get_logger("gateway.proxy")
# Lines a client can trigger once per login attempt.
limited = RateLimitedLogger("gateway.proxy")


class _Gateway(Protocol):
    registry: ConnectionRegistry


class LoggedIn(Protocol):
    """What a login changes of a connection (``pair.Pair``)."""

    gateway: _Gateway
    principal: str | None
    info: ClientInfo | None
    listener: str

    def who(self) -> dict[str, object]: ...


def principal_of(name: str | None) -> str | None:
    """The principal Kafka's default principal builder makes of a SASL name."""
    return None if name is None else f"{PRINCIPAL_TYPE}:{name}"


def settled(conn: LoggedIn, login: SaslLogin, previous: str | None) -> None:
    """``login`` ended (``login.outcome``); ``previous``: the name of the login before."""
    principal = principal_of(login.name)
    conn.principal = principal
    outcome = login.outcome or FAILED
    if conn.info is not None:
        conn.gateway.registry.set_principal(conn.info, principal, login.mechanism, outcome)
    fields = {"mechanism": login.mechanism, "listener": conn.listener, **conn.who()}
    if outcome == AUTHENTICATED:
        if previous is None:
            log.info("sasl.authenticated", **fields)
        elif login.name != previous:
            # KIP-368: the broker let another identity take over the connection.
            log.warning("sasl.principal_changed", previous=principal_of(previous), **fields)
    elif outcome == FAILED:
        limited.info("sasl.login_failed", **fields)
    else:
        limited.info("sasl.principal_not_observed", **fields)
