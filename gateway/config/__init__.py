"""The gateway's one validated configuration: TOML file, then command-line flags on top.

Every setting is a key of ``Config``, read as ``config.<key>``. Each key is declared once,
grouped by concept as the TOML file's tables are: ``addresses`` (listeners, [sidecar],
[cluster], [sni]), ``upstream`` (the broker, [broker_software]), ``features`` (ZooKeeper,
[features], [zookeeper_tls]), ``tls`` ([tls], [upstream_tls]), ``limits`` (Kafka's
names), ``processes`` and ``observability`` ([log], metrics, health). A declaration
states the key's type, default, TOML table, flag and why; reading a value follows from
its type (``_declare``), and ``load_config`` gathers file and flags and validates once,
raising ``ConfigError`` with the offending key and the reason. ``flags`` makes the
command-line options from the declarations, and ``describe`` says a key's default and
choices in words (for the flags' help and for scripts/config-docs, which writes
docs/configuration.md's reference and conf/gateway.toml). The environment variables
an operator sets are read in ``environment`` (the defaults of the keys that follow one,
and functions for code that runs without a Config). Nothing else in the gateway reads
files, flags or the environment for settings.
"""

from __future__ import annotations

from ._declare import ConfigError, HostPort, parse_host_port
from ._load import Source, config_source, load_config, reloaded, remember_source
from ._schema import SETTINGS, Config, Declared
from .addresses import sni_name, sni_node_id
from .limits import parse_ip_overrides
from .processes import MAX_WORKERS, default_workers

__all__ = [
    "MAX_WORKERS",
    "SETTINGS",
    "Config",
    "ConfigError",
    "Declared",
    "HostPort",
    "Source",
    "config_source",
    "default_workers",
    "load_config",
    "parse_host_port",
    "parse_ip_overrides",
    "reloaded",
    "remember_source",
    "sni_name",
    "sni_node_id",
]
