"""TLS on both sides: the context for the client-facing listeners and the one for upstream
connections. Beside the packages, not in ``server``: the config validates with it too.

Each is built once when the gateway starts and shared by every listener / upstream
connection (the start-up probe included). ``gateway.config`` builds them as well while
validating, so that a missing or unreadable certificate, a key that does not match it or
an encrypted key is a ``ConfigError`` naming the setting at load time, not a failure on
the first connection. Only TLS 1.2 and newer are accepted, as in Kafka 3.x/4.x.

The functions take ``TlsSettings`` (the fields of ``gateway.config.Config`` they read),
not ``Config`` itself: the config module imports this one to validate, so naming
``Config`` here would close an import circle.
"""

from __future__ import annotations

import ssl
from typing import NoReturn, Protocol

from .principal import cached_rules, principal_of


class TlsSettings(Protocol):
    """The TLS settings of ``gateway.config.Config``, both sides (read-only)."""

    @property
    def tls_cert(self) -> str | None: ...
    @property
    def tls_key(self) -> str | None: ...
    @property
    def tls_ca(self) -> str | None: ...
    @property
    def tls_client_auth(self) -> str: ...
    @property
    def upstream_tls(self) -> bool: ...
    @property
    def upstream_tls_ca(self) -> str | None: ...
    @property
    def upstream_tls_cert(self) -> str | None: ...
    @property
    def upstream_tls_key(self) -> str | None: ...
    @property
    def upstream_tls_server_hostname(self) -> str | None: ...
    @property
    def upstream_tls_check_hostname(self) -> bool: ...


class _Address(Protocol):
    """An upstream address (``gateway.config.HostPort``); only its host is read."""

    @property
    def host(self) -> str: ...


CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    # Ask for a certificate, verify it when one is sent, accept clients without one.
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class TlsSetupError(ValueError):
    """A TLS setting cannot be used; ``key`` is the config key, as in ConfigError."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


def client_side_context(cfg: TlsSettings) -> ssl.SSLContext | None:
    """The listeners' context ([tls]); None when tls_cert is not set."""
    if cfg.tls_cert is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, "tls_cert", cfg.tls_cert, "tls_key", cfg.tls_key)
    if cfg.tls_ca is not None:
        _load_ca(ctx, "tls_ca", cfg.tls_ca)
    ctx.verify_mode = CLIENT_AUTH[cfg.tls_client_auth]
    return ctx


def reload_client_chain(ctx: ssl.SSLContext, cfg: TlsSettings) -> None:
    """Live reload (SIGHUP): re-read tls_cert/tls_key into the listeners' context itself.

    The listeners keep the context they were created with, so the new chain goes into
    that same object: new handshakes present it, established connections keep theirs
    (OpenSSL copies the chain into each connection). The files are tried on a scratch
    context first, so a bad file raises TlsSetupError and leaves ``ctx`` as it was.
    """
    assert cfg.tls_cert is not None
    client_side_context(cfg)
    _load_chain(ctx, "tls_cert", cfg.tls_cert, "tls_key", cfg.tls_key)


def upstream_context(cfg: TlsSettings) -> ssl.SSLContext | None:
    """The upstream connections' context ([upstream_tls]); None when upstream_tls is off."""
    if not cfg.upstream_tls:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the host name
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cfg.upstream_tls_ca is not None:
        _load_ca(ctx, "upstream_tls_ca", cfg.upstream_tls_ca)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if cfg.upstream_tls_cert is not None:
        _load_chain(
            ctx,
            "upstream_tls_cert",
            cfg.upstream_tls_cert,
            "upstream_tls_key",
            cfg.upstream_tls_key,
        )
    # Off: the chain is still verified, only the name in it is not compared.
    ctx.check_hostname = cfg.upstream_tls_check_hostname
    return ctx


def upstream_server_hostname(cfg: TlsSettings, address: _Address) -> str | None:
    """The SNI / expected certificate name for an upstream: the override, else its host."""
    if not cfg.upstream_tls:
        return None
    return cfg.upstream_tls_server_hostname or address.host


def peer_subject(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """The verified client certificate's subject as "CN=...,O=...", for log lines."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert:
        return None
    return ",".join(
        f"{_SHORT_NAMES.get(name, name)}={value}"
        for rdn in cert.get("subject", ())
        for name, value in rdn
    )


def client_identity(
    ssl_object: ssl.SSLObject | ssl.SSLSocket | None, mapping_rules: str
) -> tuple[str | None, str | None]:
    """(subject, principal) of the verified client certificate, the principal "User:..."
    by ssl.principal.mapping.rules; (None, None) without TLS or a certificate. A SASL
    login the broker accepts replaces the principal (``gateway.server.logins``)."""
    if ssl_object is None:
        return None, None
    principal = principal_of(cached_rules(mapping_rules), ssl_object.getpeercert())
    return peer_subject(ssl_object), principal


# The usual RFC 4514 abbreviations of what Python's getpeercert() spells out.
_SHORT_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
}


def _readable(key: str, path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise TlsSetupError(key, f"cannot read {path}: {exc.strerror or exc}") from None


def _load_ca(ctx: ssl.SSLContext, key: str, path: str) -> None:
    _readable(key, path)
    try:
        ctx.load_verify_locations(cafile=path)
    except ssl.SSLError as exc:
        raise TlsSetupError(key, f"{path} holds no PEM CA certificate{_why(exc)}") from None


def _load_chain(
    ctx: ssl.SSLContext, cert_key: str, cert: str, key_key: str, key: str | None
) -> None:
    _readable(cert_key, cert)
    if key is not None:
        _readable(key_key, key)
    # Parsing the certificate alone first tells a bad certificate from a bad key.
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert)
    except ssl.SSLError as exc:
        raise TlsSetupError(cert_key, f"{cert} holds no PEM certificate{_why(exc)}") from None
    try:
        ctx.load_cert_chain(cert, key, password=_no_password)
    except _EncryptedKey:
        raise TlsSetupError(
            key_key if key is not None else cert_key,
            "the private key is encrypted; the gateway needs an unencrypted PEM key",
        ) from None
    except ssl.SSLError as exc:
        where = key if key is not None else f"{cert} (no {key_key} set)"
        reason = (
            "does not match the certificate"
            if exc.reason == "KEY_VALUES_MISMATCH"
            else f"holds no PEM private key{_why(exc)}"
        )
        raise TlsSetupError(key_key if key is not None else cert_key, f"{where} {reason}") from None


def _why(exc: ssl.SSLError) -> str:
    return f" ({exc.reason})" if exc.reason else ""


class _EncryptedKey(Exception):
    pass


def _no_password() -> NoReturn:
    # Without a callback OpenSSL would prompt on the terminal, hanging a service.
    raise _EncryptedKey
