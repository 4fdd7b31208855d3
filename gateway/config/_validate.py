"""The rules that hold between keys, by concept; a key's own rules are in its declaration."""

from __future__ import annotations

import re
from pathlib import Path

from ..tls import TlsSetupError, client_side_context, upstream_context
from ._declare import ConfigError
from ._schema import SETTINGS, Config
from .addresses import sni_name, sni_node_id


def validate(cfg: Config) -> None:
    """Raise ConfigError for the first key that is wrong, alone or with the others."""
    for key, declared in SETTINGS.items():
        if declared.setting.check is not None:
            declared.setting.check(key, getattr(cfg, key))
    _addresses(cfg)
    _upstream(cfg)
    _zookeeper_tls(cfg)
    _tls(cfg)
    _sni(cfg)


def _addresses(cfg: Config) -> None:
    if cfg.advertised in ("0.0.0.0", "::"):
        raise ConfigError(
            "advertised_host", "the listener binds all interfaces; set the host clients should use"
        )
    if cfg.mode == "cluster" and cfg.port_base is not None and not 1 <= cfg.port_base <= 65535:
        raise ConfigError("port_base", f"must be a port, got {cfg.port_base}")
    if cfg.mode != "cluster":
        for key in ("advertised_brokers", "broker_upstreams", "sni_broker_host"):
            if getattr(cfg, key):
                raise ConfigError(key, 'needs mode = "cluster"')


def _upstream(cfg: Config) -> None:
    if cfg.broker_software_name_tag == cfg.broker_software_version_tag:
        raise ConfigError("broker_software_version_tag", "must differ from the name tag")
    if (cfg.broker_software_name is None) != (cfg.broker_software_version is None):
        raise ConfigError(
            "broker_software_version",
            "set broker_software_name and broker_software_version together",
        )


def _zookeeper_tls(cfg: Config) -> None:
    if (cfg.zookeeper_tls_cert is None) != (cfg.zookeeper_tls_key is None):
        raise ConfigError(
            "zookeeper_tls.key", "set zookeeper_tls_cert and zookeeper_tls_key together"
        )
    for key in ("zookeeper_tls_ca", "zookeeper_tls_cert", "zookeeper_tls_key"):
        path = getattr(cfg, key)
        if path is not None and not cfg.zookeeper_tls:
            raise ConfigError(key, "set zookeeper_tls = true ([zookeeper_tls] enabled) to use it")
        if path is not None and not Path(path).is_file():
            raise ConfigError(key, f"file {path} does not exist")


def _tls(cfg: Config) -> None:
    if cfg.tls_cert is None:
        for key in ("tls_key", "tls_ca"):
            if getattr(cfg, key) is not None:
                raise ConfigError(key, "needs tls_cert (TLS towards clients is off without it)")
        if cfg.tls_client_auth != "none":
            raise ConfigError("tls_client_auth", "needs tls_cert and tls_ca")
    elif cfg.tls_client_auth != "none" and cfg.tls_ca is None:
        raise ConfigError("tls_client_auth", "needs tls_ca, the CA that signs client certificates")
    elif cfg.tls_ca is not None and cfg.tls_client_auth == "none":
        raise ConfigError(
            "tls_ca",
            "only verifies client certificates: set tls_client_auth to requested or required",
        )
    if not cfg.upstream_tls:
        for key in (
            "upstream_tls_ca",
            "upstream_tls_cert",
            "upstream_tls_key",
            "upstream_tls_server_hostname",
        ):
            if getattr(cfg, key) is not None:
                raise ConfigError(key, "needs upstream_tls = true ([upstream_tls] enabled = true)")
    elif cfg.upstream_tls_key is not None and cfg.upstream_tls_cert is None:
        raise ConfigError("upstream_tls_key", "needs upstream_tls_cert")
    if cfg.upstream_tls_server_hostname == "":
        raise ConfigError("upstream_tls_server_hostname", "must not be empty")
    # Load every file now: a bad one is a config error at start, not a failed handshake.
    try:
        client_side_context(cfg)
        upstream_context(cfg)
    except TlsSetupError as exc:
        raise ConfigError(exc.key, exc.reason) from None


_HOSTNAME = re.compile(
    r"(?i)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
)


def _sni(cfg: Config) -> None:
    if cfg.sni_broker_host is None:
        if cfg.sni_bootstrap_host is not None:
            raise ConfigError("sni.bootstrap_host", "needs sni.broker_host")
        return
    if cfg.tls_cert is None:
        raise ConfigError("sni.broker_host", "SNI routing needs TLS towards clients (tls.cert)")
    try:
        names = {sni_name(cfg.sni_broker_host, n) for n in (0, 1)}
    except (KeyError, IndexError, ValueError):
        names = set()
    if len(names) != 2 or cfg.sni_broker_host.count("{node_id}") != 1:
        raise ConfigError(
            "sni.broker_host",
            "must hold {node_id} once and no other {...}, e.g. broker-{node_id}.kafka.example.com",
        )
    for key, checked in (("sni.broker_host", names), ("sni.bootstrap_host", {cfg.sni_bootstrap})):
        if not all(_HOSTNAME.fullmatch(name) for name in checked):
            raise ConfigError(key, "server names are DNS names (letters, digits, '-' and '.')")
    if sni_node_id(cfg.sni_broker_host, cfg.sni_bootstrap) is not None:
        raise ConfigError("sni.bootstrap_host", "must not match the broker_host pattern")
