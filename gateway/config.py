"""The gateway's one validated configuration: TOML file, then command-line flags on top.

Every setting lives in ``Config``; ``load_config`` gathers file and flags and validates
once, raising ``ConfigError`` with the offending key and the reason. Nothing else in
the gateway reads files, flags or the environment for settings.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from .cpus import usable_cpus
from .features.catalogue import CatalogueError, load_catalogue
from .principal import PrincipalRuleError, parse_rules
from .protocol import DEFAULT_MAX_FRAME_BYTES
from .server.tls import CLIENT_AUTH, TlsSetupError, client_side_context, upstream_context

Mode = Literal["sidecar", "cluster"]
LogFormat = Literal["auto", "json", "console"]
UnknownApiKeys = Literal["close", "forward"]
EmbeddedBroker = Literal["tansu", "kafka"]


class ConfigError(ValueError):
    """A setting is invalid; the message names the key and says why."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"invalid config: {key}: {reason}")
        self.key = key
        self.reason = reason


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Config:
    # Where clients connect. In cluster mode this is the bootstrap listener.
    listen: HostPort = HostPort("127.0.0.1", 9092)
    # The broker (sidecar) or any bootstrap broker of the cluster (cluster mode).
    # None means: start a local ZooKeeper and broker (the embedded default).
    upstream: HostPort | None = None
    # The broker the embedded default starts: "tansu" (light, starts at once) or "kafka"
    # (Apache Kafka 4.x in KRaft mode, its jars fetched with Maven on first use).
    embedded_broker: EmbeddedBroker = "tansu"
    # The host clients are told to use for this gateway; defaults to the listen host.
    advertised_host: str | None = None
    mode: Mode = "sidecar"
    # ZooKeeper holding finalized feature levels (KIP-584); None turns feature gating off
    # (no versions withheld, nothing finalized). The embedded default starts one.
    zookeeper: str | None = None
    zookeeper_chroot: str = "/kafka-gateway"
    # "user:password" for ZooKeeper digest auth (only needed when ACLs restrict reads).
    zookeeper_auth: str | None = None
    # Connect timeout at startup and ZooKeeper session timeout.
    zookeeper_timeout_s: float = 10.0
    # This gateway's registration id under <chroot>/gateways/ids; default "host:port"
    # of the advertised listener.
    gateway_id: str | None = None
    # The feature catalogue (TOML); None: the built-in one (gateway/data/features.toml).
    features_catalogue: str | None = None
    # Client addresses (CIDRs) whose UpdateFeatures requests the gateway executes; all
    # others get CLUSTER_AUTHORIZATION_FAILED. Empty: refuse everyone (use featurectl).
    features_update_allowed_from: tuple[str, ...] = ()
    metrics_listen: HostPort | None = None
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    upstream_connect_timeout_s: float = 10.0
    # /readyz answers 503 while the upstream broker does not answer ApiVersions, checked
    # this often by the process that serves /readyz (gateway.server.upstream_watch).
    # 0: readiness is the listeners only, as Kafka's own is.
    readiness_upstream_check_ms: int = 5000
    # How long SIGTERM waits for in-flight requests before closing connections.
    drain_timeout_s: float = 30.0
    # Upgrade in place (docs/upgrade-in-place.md): a Unix socket path. A running gateway
    # listens there; a new one started with the same path takes its listening sockets
    # over instead of binding (no refused connection), and the old one drains. None: off.
    upgrade_socket: str | None = None
    log_format: LogFormat = "auto"
    log_level: str = "info"
    # Request log ([log] requests / request_level): the fraction of requests logged when
    # answered (0 = off, 1 = all) and the level of those lines.
    log_requests: float = 0.0
    log_request_level: str = "info"
    # Sidecar mode: the node id of the broker this gateway stands beside (None: any
    # broker not listed in ``peers`` is taken to be ours), and where the gateways of the
    # other brokers are reached ({node_id: "host:port"}).
    node_id: int | None = None
    peers: dict[int, HostPort] = field(default_factory=dict)
    # Cluster mode: one listener per broker at ``port_base + node_id`` unless ``ports``
    # names the port for that node id.
    port_base: int | None = None
    ports: dict[int, int] = field(default_factory=dict)
    # KIP-885: the broker software reported to clients. Unset: fingerprinted from the
    # upstream's ApiVersions against Apache Kafka's release tables.
    broker_software_name: str | None = None
    broker_software_version: str | None = None
    # Tagged-field numbers of BrokerSoftwareName/Version in ApiVersions v3+ and
    # DescribeCluster responses; far above Kafka's own tags (0-3) so they never collide.
    broker_software_name_tag: int = 10000
    broker_software_version_tag: int = 10001
    # KIP-700: answer DescribeCluster from Metadata even when the upstream has it.
    synthesize_describe_cluster: bool = False
    # TLS towards clients ([tls]), on when tls_cert is set; tls_key may be left out when
    # the cert file holds the key too. tls_client_auth: "none", "requested" (verify a
    # certificate when the client sends one) or "required"; the last two need tls_ca.
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    tls_client_auth: str = "none"
    # TLS towards the broker ([upstream_tls], ``enabled = true`` in the table). Without
    # upstream_tls_ca the system's trusted CAs verify the broker. The certificate must
    # name upstream_tls_server_hostname (sent as SNI), else the upstream host.
    upstream_tls: bool = False
    upstream_tls_ca: str | None = None
    upstream_tls_cert: str | None = None
    upstream_tls_key: str | None = None
    upstream_tls_server_hostname: str | None = None
    upstream_tls_check_hostname: bool = True
    # -- Edge: one TLS port for a cluster (SNI), advertised overrides, API keys --------
    # The port clients are told for ``listen`` (a load balancer or NodePort forwards it
    # to the gateway); None: the port the gateway listens on.
    advertised_port: int | None = None
    # Cluster mode: per node id, the "host:port" clients are told for that broker, in
    # place of advertised_host and its listener port (or its SNI name and the shared port).
    advertised_brokers: dict[int, HostPort] = field(default_factory=dict)
    # Cluster mode: per node id, where the gateway dials that broker, in place of the
    # address the broker advertises (for brokers whose advertised address the gateway
    # cannot reach).
    broker_upstreams: dict[int, HostPort] = field(default_factory=dict)
    # [sni] broker_host: a pattern with "{node_id}" (e.g. "broker-{node_id}.kafka.example
    # .com"). Set, every broker is served on the one TLS ``listen`` port and routed by the
    # TLS server name; sni_bootstrap_host (default: the advertised host) reaches any broker.
    sni_broker_host: str | None = None
    sni_bootstrap_host: str | None = None
    # A request with an API key the gateway does not know: "close" the connection (as
    # Kafka does) or "forward" it untouched (vendor keys, e.g. Confluent Cloud's 10000).
    unknown_api_keys: UnknownApiKeys = "close"
    # -- hardening (issue 13) ----------------------------------------------------------
    # Log lines about bad input: at most this many per event and interval; the next
    # line after an interval with more carries ``suppressed`` (the count left out).
    log_bad_input_burst: int = 10
    log_bad_input_interval_s: float = 10.0
    # Kafka's ssl.principal.mapping.rules: how a client certificate's subject becomes
    # the connection's principal ("User:" + the result), e.g. "RULE:^CN=(.*?),.*$/$1/L,DEFAULT".
    tls_principal_mapping_rules: str = "DEFAULT"
    # Principals ("User:CN=ops,O=example" or "User:ops" after mapping) allowed to send
    # UpdateFeatures. With features_update_allowed_from as well, both must match.
    features_update_allowed_principals: tuple[str, ...] = ()
    # TLS towards ZooKeeper ([zookeeper_tls]); zookeeper_tls_cert/key for mutual TLS.
    zookeeper_tls: bool = False
    zookeeper_tls_ca: str | None = None
    zookeeper_tls_cert: str | None = None
    zookeeper_tls_key: str | None = None
    zookeeper_tls_check_hostname: bool = True
    # SASL towards ZooKeeper: "user:password" with DIGEST-MD5 (the server's JAAS
    # DigestLoginModule); zookeeper_auth is the other kind, digest ACL credentials.
    zookeeper_sasl: str | None = None
    # -- connection limits (issue 13), Kafka's names and defaults ----------------------
    # Close a connection with no request in flight and no traffic for this long.
    connections_max_idle_ms: int = 600000
    # Caps checked when a connection is accepted (Kafka's default: Int.MaxValue, i.e.
    # none); over a cap the connection is closed at once.
    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    # "host:count,host:count" as Kafka's max.connections.per.ip.overrides.
    max_connections_per_ip_overrides: str = ""
    # New connections per second; over it a new connection is held unread until its
    # turn, as Kafka's acceptor throttles, and closed if that would take longer than
    # connection_first_request_timeout_ms. Caps and rate hold across all workers.
    max_connection_creation_rate: int = 2**31 - 1
    # Not Kafka's: a client must complete its first request within this long after the
    # connection opened, else it is closed; 10 s like upstream_connect_timeout_s.
    # Without it a half-open or trickling client is only found connections_max_idle_ms
    # (10 min) later, holding a socket and its buffers all that time.
    connection_first_request_timeout_ms: int = 10000
    # Bytes buffered gateway-wide in partial requests and undelivered responses; over
    # it, connections holding such bytes stop being read. Kafka's default is -1
    # (unlimited); 256 MiB bounds memory yet fits two max_frame_bytes frames. -1: none.
    queued_max_request_bytes: int = 256 * 1024 * 1024
    # Not Kafka's: the most distinct KIP-511 (client software name, version) pairs that
    # get their own metric labels (per worker); a client announces whatever strings it
    # likes, so without a cap one could add series, and /metrics memory, without bound.
    # Pairs beyond it are labelled "other".
    max_client_software_labels: int = 1000
    # -- processes (issue 12) ----------------------------------------------------------
    # Worker processes, each accepting on every listener; 1 is a single process with no
    # supervisor. Default: the CPUs this process may use: its affinity (a container's
    # cpuset or `taskset`), capped by a cgroup CPU quota (a Kubernetes CPU limit), not
    # the host's core count (gateway/cpus.py).
    workers: int = field(default_factory=lambda: default_workers())

    @property
    def advertised(self) -> str:
        if self.advertised_host:
            return self.advertised_host
        if self.sni_broker_host is not None and self.sni_bootstrap_host is not None:
            return self.sni_bootstrap_host  # with SNI, the name clients bootstrap from
        return self.listen.host

    @property
    def advertised_listen_port(self) -> int:
        return self.advertised_port if self.advertised_port is not None else self.listen.port

    @property
    def sni_bootstrap(self) -> str:
        return self.sni_bootstrap_host or self.advertised

    def cluster_port(self, node_id: int) -> int:
        if node_id in self.ports:
            return self.ports[node_id]
        base = self.port_base if self.port_base is not None else self.listen.port + 1
        return base + node_id


def default_workers() -> int:
    return usable_cpus()


MAX_WORKERS = 512


def parse_host_port(key: str, value: object, default_host: str | None = None) -> HostPort:
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"expected 'HOST:PORT', got {value!r}")
    if value.startswith("["):  # [IPv6]:PORT
        host, bracket, rest = value[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ConfigError(key, f"expected '[HOST]:PORT', got {value!r}")
        port_text = rest[1:]
    else:
        host, sep, port_text = value.rpartition(":")
        if not sep:
            if default_host is None:
                raise ConfigError(key, f"expected 'HOST:PORT', got {value!r}")
            host, port_text = default_host, value
        elif ":" in host or "[" in host or "]" in host:
            raise ConfigError(key, f"IPv6 hosts go in brackets, '[HOST]:PORT', got {value!r}")
    if not host:
        raise ConfigError(key, f"missing host in {value!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(key, f"port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ConfigError(key, f"port {port} is outside 0-65535")
    return HostPort(host, port)


_FILE_KEYS = {f.name for f in fields(Config)}


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Read ``path`` (TOML) if given, apply ``overrides`` (flags, None = not given), validate."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError("--config", f"file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("--config", f"{path} is not valid TOML: {exc}") from None
    raw = _flatten(raw)
    for key, value in (overrides or {}).items():
        if value is not None:
            raw[key] = value
    return _build(raw)


def _flatten(raw: dict[str, Any]) -> dict[str, Any]:
    """Accept the documented table layout ([sidecar], [cluster], [log]) as flat keys."""
    flat = dict(raw)
    for table, prefix in (
        ("log", "log_"),
        ("sidecar", ""),
        ("cluster", ""),
        ("broker_software", "broker_software_"),
        ("features", "features_"),
        ("tls", "tls_"),
        ("upstream_tls", "upstream_tls_"),
        ("sni", "sni_"),
        ("zookeeper_tls", "zookeeper_tls_"),
    ):
        section = flat.pop(table, None)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise ConfigError(table, "expected a table")
        for key, value in section.items():
            # [upstream_tls] enabled = true sets the key named like the table itself.
            name = table if key == "enabled" and table in _FILE_KEYS else prefix + key
            if name not in _FILE_KEYS:
                raise ConfigError(f"{table}.{key}", f"unknown setting in [{table}]")
            flat[name] = value
    return flat


def _build(raw: dict[str, Any]) -> Config:
    unknown = sorted(set(raw) - _FILE_KEYS)
    if unknown:
        raise ConfigError(unknown[0], f"unknown setting (known: {', '.join(sorted(_FILE_KEYS))})")
    cfg = Config()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        values[key] = _convert(key, value)
    cfg = replace(cfg, **values)
    _validate(cfg)
    return cfg


_LIMIT_INTS = (
    "connections_max_idle_ms",
    "max_connections",
    "max_connections_per_ip",
    "max_connection_creation_rate",
    "connection_first_request_timeout_ms",
    "queued_max_request_bytes",
    "max_client_software_labels",
    "workers",
)


def _convert(key: str, value: Any) -> Any:
    if key in _LIMIT_INTS or key == "readiness_upstream_check_ms":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {value!r}")
        return value
    if key in ("listen", "metrics_listen"):
        return parse_host_port(key, value, default_host="127.0.0.1" if key == "listen" else None)
    if key == "upstream":
        return parse_host_port(key, value)
    if key in (
        "synthesize_describe_cluster",
        "upstream_tls",
        "upstream_tls_check_hostname",
        "zookeeper_tls",
        "zookeeper_tls_check_hostname",
    ):
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {value!r}")
        return value
    if key in (
        "max_frame_bytes",
        "node_id",
        "port_base",
        "broker_software_name_tag",
        "broker_software_version_tag",
        "log_bad_input_burst",
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {value!r}")
        return value
    if key == "features_update_allowed_from":
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(key, f"expected a list of CIDRs, got {value!r}")
        for cidr in value:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as exc:
                raise ConfigError(key, str(exc)) from None
        return tuple(value)
    if key == "log_requests":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ConfigError(key, f"expected a fraction between 0 and 1, got {value!r}")
        return float(value)
    if key == "features_update_allowed_principals":
        if not isinstance(value, list | tuple) or not all(
            isinstance(v, str) and v.startswith("User:") for v in value
        ):
            raise ConfigError(key, f"expected a list of 'User:NAME' principals, got {value!r}")
        return tuple(value)
    if key in (
        "upstream_connect_timeout_s",
        "drain_timeout_s",
        "zookeeper_timeout_s",
        "log_bad_input_interval_s",
    ):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(key, f"expected a number of seconds, got {value!r}")
        return float(value)
    if key == "peers":
        return {_node_id(key, k): parse_host_port(f"{key}.{k}", v) for k, v in _table(key, value)}
    if key in ("advertised_brokers", "broker_upstreams"):
        return {_node_id(key, k): parse_host_port(f"{key}.{k}", v) for k, v in _table(key, value)}
    if key == "advertised_port":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
            raise ConfigError(key, f"expected a port 1-65535, got {value!r}")
        return value
    if key == "ports":
        out = {}
        for k, v in _table(key, value):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535:
                raise ConfigError(f"{key}.{k}", f"expected a port 1-65535, got {v!r}")
            out[_node_id(key, k)] = v
        return out
    if not isinstance(value, str):
        raise ConfigError(key, f"expected a string, got {value!r}")
    return value


def _table(key: str, value: Any) -> list[tuple[Any, Any]]:
    if not isinstance(value, dict):
        raise ConfigError(key, "expected a table of node id = value")
    return list(value.items())


def _node_id(key: str, raw: Any) -> int:
    try:
        node_id = int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}.{raw}", "node ids are integers") from None
    if node_id < 0:
        raise ConfigError(f"{key}.{raw}", "node ids are >= 0")
    return node_id


def _validate(cfg: Config) -> None:
    if cfg.mode not in ("sidecar", "cluster"):
        raise ConfigError("mode", f"must be 'sidecar' or 'cluster', got {cfg.mode!r}")
    if cfg.log_format not in ("auto", "json", "console"):
        raise ConfigError("log_format", f"must be auto, json or console, got {cfg.log_format!r}")
    for key in ("log_level", "log_request_level"):
        if getattr(cfg, key).lower() not in ("debug", "info", "warning", "error"):
            raise ConfigError(
                key, f"must be debug, info, warning or error, got {getattr(cfg, key)!r}"
            )
    # Kafka's own frames can't be smaller than a header, and a size field is an int32.
    if not 64 <= cfg.max_frame_bytes <= 2**31 - 1:
        raise ConfigError(
            "max_frame_bytes", f"must be between 64 and 2147483647, got {cfg.max_frame_bytes}"
        )
    if not 1 <= cfg.workers <= MAX_WORKERS:
        raise ConfigError(
            "workers", f"must be between 1 and {MAX_WORKERS} processes, got {cfg.workers}"
        )
    for key in (
        "upstream_connect_timeout_s",
        "drain_timeout_s",
        "zookeeper_timeout_s",
        "log_bad_input_interval_s",
    ):
        if not getattr(cfg, key) > 0:  # "not >" also rejects NaN, which TOML allows
            raise ConfigError(key, f"must be > 0, got {getattr(cfg, key)}")
    if cfg.readiness_upstream_check_ms < 0:
        raise ConfigError(
            "readiness_upstream_check_ms", f"must be >= 0, got {cfg.readiness_upstream_check_ms}"
        )
    if cfg.upgrade_socket is not None and not 0 < len(cfg.upgrade_socket.encode()) < 108:
        # sun_path holds 107 bytes and a NUL; a longer path cannot be bound.
        raise ConfigError("upgrade_socket", "must be a path of 1 to 107 bytes")
    if cfg.node_id is not None and cfg.node_id < 0:
        raise ConfigError("node_id", f"node ids are >= 0, got {cfg.node_id}")
    if cfg.advertised in ("0.0.0.0", "::"):
        raise ConfigError(
            "advertised_host", "the listener binds all interfaces; set the host clients should use"
        )
    tags = (cfg.broker_software_name_tag, cfg.broker_software_version_tag)
    for key, tag in zip(
        ("broker_software_name_tag", "broker_software_version_tag"), tags, strict=True
    ):
        # Tags 0-3 are ApiVersions' own; below 0 or above a varint int32 is not a tag.
        if not 4 <= tag <= 2**31 - 1:
            raise ConfigError(key, f"must be between 4 and 2147483647, got {tag}")
    if tags[0] == tags[1]:
        raise ConfigError("broker_software_version_tag", "must differ from the name tag")
    if (cfg.broker_software_name is None) != (cfg.broker_software_version is None):
        raise ConfigError(
            "broker_software_version",
            "set broker_software_name and broker_software_version together",
        )
    if cfg.zookeeper_chroot.strip("/") == "":
        raise ConfigError("zookeeper_chroot", "must name a path below '/', e.g. /kafka-gateway")
    _validate_hardening(cfg)
    _validate_limits(cfg)
    if cfg.zookeeper_auth is not None and ":" not in cfg.zookeeper_auth:
        raise ConfigError("zookeeper_auth", "expected 'user:password'")
    if cfg.gateway_id is not None and (
        not cfg.gateway_id or "/" in cfg.gateway_id or cfg.gateway_id in (".", "..")
    ):
        raise ConfigError(
            "gateway_id", f"must be a non-empty name without '/', got {cfg.gateway_id!r}"
        )
    try:
        load_catalogue(cfg.features_catalogue)
    except CatalogueError as exc:
        raise ConfigError("features.catalogue", str(exc)) from None
    if cfg.mode == "cluster" and cfg.port_base is not None and not 1 <= cfg.port_base <= 65535:
        raise ConfigError("port_base", f"must be a port, got {cfg.port_base}")
    _validate_tls(cfg)
    _validate_edge(cfg)


def _validate_edge(cfg: Config) -> None:
    """[sni], the advertised overrides, unknown_api_keys and embedded_broker."""
    if cfg.embedded_broker not in ("tansu", "kafka"):
        raise ConfigError("embedded_broker", f"must be tansu or kafka, got {cfg.embedded_broker!r}")
    if cfg.unknown_api_keys not in ("close", "forward"):
        raise ConfigError(
            "unknown_api_keys", f"must be close or forward, got {cfg.unknown_api_keys!r}"
        )
    if cfg.mode != "cluster":
        for key in ("advertised_brokers", "broker_upstreams", "sni_broker_host"):
            if getattr(cfg, key):
                raise ConfigError(key, 'needs mode = "cluster"')
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


_HOSTNAME = re.compile(
    r"(?i)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
)


def sni_name(pattern: str, node_id: int) -> str:
    """The server name of a broker under an [sni] broker_host pattern."""
    return pattern.format(node_id=node_id)


def sni_node_id(pattern: str, server_name: str) -> int | None:
    """The node id a server name names under ``pattern``; None when it names none.

    DNS names compare without case (RFC 4343), so the match ignores it too.
    """
    prefix, _, suffix = pattern.lower().partition("{node_id}")
    name = server_name.lower()
    if not (name.startswith(prefix) and name.endswith(suffix)):
        return None
    digits = name[len(prefix) : len(name) - len(suffix)]
    # "broker-007" is not broker 7: only the spelling the gateway advertises routes.
    if not digits.isascii() or not digits.isdigit() or digits != str(int(digits)):
        return None
    return int(digits)


def _validate_tls(cfg: Config) -> None:
    if cfg.tls_client_auth not in CLIENT_AUTH:
        raise ConfigError(
            "tls_client_auth", f"must be none, requested or required, got {cfg.tls_client_auth!r}"
        )
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


def _validate_hardening(cfg: Config) -> None:
    """Issue 13's settings: log limits, principal mapping, ZooKeeper TLS and SASL."""
    if cfg.log_bad_input_burst < 1:
        raise ConfigError("log_bad_input_burst", f"must be >= 1, got {cfg.log_bad_input_burst}")
    try:
        parse_rules(cfg.tls_principal_mapping_rules)
    except PrincipalRuleError as exc:
        raise ConfigError("tls.principal_mapping_rules", str(exc)) from None
    if cfg.zookeeper_sasl is not None and ":" not in cfg.zookeeper_sasl:
        raise ConfigError("zookeeper_sasl", "expected 'user:password'")
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


def _validate_limits(cfg: Config) -> None:
    """The connection limits: positive, and overrides in Kafka's "host:count,..." form."""
    for key in _LIMIT_INTS:
        value = getattr(cfg, key)
        if key == "queued_max_request_bytes" and value == -1:
            continue
        if value < 1:
            raise ConfigError(key, f"must be >= 1, got {value}")
    try:
        parse_ip_overrides(cfg.max_connections_per_ip_overrides)
    except ValueError as exc:
        raise ConfigError("max_connections_per_ip_overrides", str(exc)) from None


def parse_ip_overrides(text: str) -> dict[str, int]:
    """Kafka's max.connections.per.ip.overrides: "host:count,..." (IPv6 hosts: [::1]:5)."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.isdigit():
            raise ValueError(f"expected host:count, got {item!r}")
        out[host.strip("[]")] = int(count)
    return out
