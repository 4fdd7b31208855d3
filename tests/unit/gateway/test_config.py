"""Configuration: TOML file, flags on top, one validation pass naming the offending key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config import SETTINGS, Config, ConfigError, HostPort, load_config, parse_host_port
from gateway.protocol import DEFAULT_MAX_FRAME_BYTES

REPO = Path(__file__).resolve().parents[3]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def error_key(path: Path | None = None, **overrides: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    exc = info.value
    assert str(exc).startswith(f"invalid config: {exc.key}: ")
    assert exc.reason and exc.reason in str(exc)
    return exc.key


# -- sources and precedence ------------------------------------------------------------


def test_no_file_and_no_flags_gives_the_defaults() -> None:
    cfg = load_config()
    assert cfg == Config()
    assert cfg.listen == HostPort("127.0.0.1", 9092)
    assert cfg.upstream is None  # the embedded local stack
    assert cfg.mode == "sidecar"
    assert cfg.max_frame_bytes == DEFAULT_MAX_FRAME_BYTES == 100 * 1024 * 1024
    assert cfg.advertised == "127.0.0.1"


def test_the_shipped_example_config_loads() -> None:
    cfg = load_config(REPO / "conf" / "gateway.toml")
    assert cfg.listen == HostPort("0.0.0.0", 9092)
    assert cfg.upstream == HostPort("127.0.0.1", 9093)
    assert cfg.advertised == "kafka-0.gateway.example"
    assert (cfg.log_format, cfg.log_level) == ("auto", "info")


FULL = """
listen = "0.0.0.0:9192"
upstream = "broker-0.internal:9092"
advertised_host = "kafka-0.example"
mode = "cluster"
zookeeper = "zk-1:2181,zk-2:2181/kafka"
metrics_listen = "[::]:9404"
max_frame_bytes = 1048576
upstream_connect_timeout_s = 2
drain_timeout_s = 0.5

[log]
format = "json"
level = "DEBUG"

[sidecar]
node_id = 3

[sidecar.peers]
1 = "gw-1.example:9092"
2 = "[fd00::2]:9092"

[cluster]
port_base = 20000

[cluster.ports]
0 = 19092
"""


def test_every_setting_is_read_from_toml_including_tables(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL))
    assert cfg == Config(
        listen=HostPort("0.0.0.0", 9192),
        upstream=HostPort("broker-0.internal", 9092),
        advertised_host="kafka-0.example",
        mode="cluster",
        zookeeper="zk-1:2181,zk-2:2181/kafka",
        metrics_listen=HostPort("::", 9404),
        max_frame_bytes=1048576,
        upstream_connect_timeout_s=2.0,
        drain_timeout_s=0.5,
        log_format="json",
        log_level="DEBUG",
        node_id=3,
        peers={1: HostPort("gw-1.example", 9092), 2: HostPort("fd00::2", 9092)},
        port_base=20000,
        ports={0: 19092},
    )
    assert isinstance(cfg.upstream_connect_timeout_s, float)


def test_flags_override_the_file_and_unset_flags_do_not(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    cfg = load_config(
        path,
        {
            "listen": "127.0.0.1:7000",
            "log_level": "warning",
            "upstream": None,  # flag not given: the file's value stays
            "max_frame_bytes": None,
            "mode": "sidecar",
        },
    )
    assert cfg.listen == HostPort("127.0.0.1", 7000)
    assert cfg.log_level == "warning"  # flag beats the [log] table
    assert cfg.mode == "sidecar"
    assert cfg.upstream == HostPort("broker-0.internal", 9092)
    assert cfg.max_frame_bytes == 1048576


def test_flags_alone_without_a_file() -> None:
    cfg = load_config(None, {"upstream": "localhost:9093", "advertised_host": "gw.example"})
    assert cfg.upstream == HostPort("localhost", 9093)
    assert cfg.advertised == "gw.example"


def test_log_table_sets_log_format_and_level(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, '[log]\nformat = "console"\nlevel = "error"\n'))
    assert (cfg.log_format, cfg.log_level) == ("console", "error")


def test_sidecar_and_cluster_tables(tmp_path: Path) -> None:
    cfg = load_config(
        write(
            tmp_path,
            '[sidecar]\nnode_id = 0\n[sidecar.peers]\n1 = "b:1"\n'
            "[cluster]\nport_base = 30000\n[cluster.ports]\n2 = 31000\n",
        )
    )
    assert cfg.node_id == 0 and cfg.peers == {1: HostPort("b", 1)}
    assert cfg.cluster_port(0) == 30000 and cfg.cluster_port(5) == 30005
    assert cfg.cluster_port(2) == 31000  # named in [cluster.ports]


def test_cluster_port_defaults_to_the_port_after_the_listener() -> None:
    cfg = load_config(None, {"listen": "127.0.0.1:9092"})
    assert cfg.cluster_port(0) == 9093 and cfg.cluster_port(4) == 9097


def test_missing_file_and_bad_toml_name_the_config_flag(tmp_path: Path) -> None:
    assert error_key(tmp_path / "nope.toml") == "--config"
    assert error_key(write(tmp_path, "listen = \n")) == "--config"


# -- unknown keys ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('lisen = "127.0.0.1:9092"\n', "lisen"),
        ('zz = 1\naa = 2\nlisten = "127.0.0.1:1"\n', "aa"),  # the first, sorted
        ('[log]\nlevl = "info"\n', "log.levl"),
        ("[sidecar]\nnodeid = 1\n", "sidecar.nodeid"),
        ("[cluster]\nbase = 1\n", "cluster.base"),
        ("[tls]\nenabled = true\n", "tls.enabled"),  # client TLS is on when cert is set
    ],
)
def test_unknown_keys_are_rejected_by_name(tmp_path: Path, text: str, key: str) -> None:
    assert error_key(write(tmp_path, text)) == key


def test_unknown_flag_is_rejected_by_name() -> None:
    assert error_key(None, listen_port=9092) == "listen_port"


@pytest.mark.parametrize("table", ["log", "sidecar", "cluster"])
def test_a_table_name_used_as_a_plain_key_is_rejected(tmp_path: Path, table: str) -> None:
    assert error_key(write(tmp_path, f'{table} = "x"\n')) == table


# -- value validation ------------------------------------------------------------------

BAD_VALUES = [
    ("mode", "both"),
    ("mode", 1),
    ("log_format", "xml"),
    ("log_level", "trace"),
    ("log_level", 10),
    ("max_frame_bytes", 63),
    ("max_frame_bytes", 2**31),
    ("max_frame_bytes", True),
    ("max_frame_bytes", "1MiB"),
    ("max_frame_bytes", 1.5),
    ("upstream_connect_timeout_s", 0),
    ("upstream_connect_timeout_s", -1.0),
    ("upstream_connect_timeout_s", "10"),
    ("upstream_connect_timeout_s", True),
    ("upstream_connect_timeout_s", float("nan")),
    ("drain_timeout_s", 0.0),
    ("drain_timeout_s", float("nan")),
    ("drain_timeout_s", -5),
    ("node_id", "1"),
    ("node_id", True),
    ("node_id", -1),
    ("port_base", "20000"),
    ("zookeeper", 2181),
    ("advertised_host", 5),
    ("listen", "localhost:abc"),
    ("listen", 9092),
    ("upstream", "broker"),
    ("upstream", ""),
    ("metrics_listen", "9404"),
    ("peers", "b:1"),
    ("ports", [19092]),
]


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_bad_value_is_rejected_naming_its_key(key: str, value: Any) -> None:
    assert error_key(None, **{key: value}) == key


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("peers", {"x": "b:1"}, "peers.x"),
        ("peers", {"-1": "b:1"}, "peers.-1"),
        ("peers", {"1": "b"}, "peers.1"),
        ("peers", {"1": "b:70000"}, "peers.1"),
        ("ports", {"0": 0}, "ports.0"),
        ("ports", {"0": 65536}, "ports.0"),
        ("ports", {"0": "19092"}, "ports.0"),
        ("ports", {"0": True}, "ports.0"),
        ("ports", {"a": 19092}, "ports.a"),
    ],
)
def test_bad_table_entry_is_named_by_table_and_node(key: str, value: Any, named: str) -> None:
    assert error_key(None, **{key: value}) == named


@pytest.mark.parametrize("listen", ["0.0.0.0:9092", "[::]:9092"])
def test_wildcard_listener_needs_an_advertised_host(listen: str) -> None:
    assert error_key(None, listen=listen) == "advertised_host"
    cfg = load_config(None, {"listen": listen, "advertised_host": "gw.example"})
    assert cfg.advertised == "gw.example"


@pytest.mark.parametrize("port_base", [0, 65536])
def test_cluster_port_base_must_be_a_port(port_base: int) -> None:
    assert error_key(None, mode="cluster", port_base=port_base) == "port_base"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_frame_bytes", 64),
        ("max_frame_bytes", 2**31 - 1),
        ("log_level", "WARNING"),
        ("upstream_connect_timeout_s", 0.001),
        ("node_id", 0),
        ("listen", "127.0.0.1:0"),  # an ephemeral port, as tests use
    ],
)
def test_boundary_values_are_accepted(key: str, value: Any) -> None:
    load_config(None, {key: value})


def test_nan_in_toml_is_rejected(tmp_path: Path) -> None:
    assert error_key(write(tmp_path, "drain_timeout_s = nan\n")) == "drain_timeout_s"


# -- HOST:PORT -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("broker:9092", HostPort("broker", 9092)),
        ("kafka-0.example.com:65535", HostPort("kafka-0.example.com", 65535)),
        ("10.0.0.1:0", HostPort("10.0.0.1", 0)),
        ("[::1]:9092", HostPort("::1", 9092)),
        ("[fe80::1%eth0]:19092", HostPort("fe80::1%eth0", 19092)),
        ("[::]:9404", HostPort("::", 9404)),
    ],
)
def test_host_port_parses(text: str, expected: HostPort) -> None:
    assert parse_host_port("upstream", text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("::1", id="ipv6-without-brackets-or-port"),
        pytest.param("fe80::1:9092", id="ipv6-without-brackets"),
        pytest.param("[::1", id="unclosed-bracket"),
        pytest.param("[::1]", id="bracketed-without-port"),
        pytest.param("[::1]9092", id="no-colon-after-bracket"),
        pytest.param("::1]:9092", id="stray-closing-bracket"),
        pytest.param("[]:9092", id="empty-brackets"),
        pytest.param("broker", id="missing-port"),
        pytest.param("broker:", id="empty-port"),
        pytest.param(":9092", id="missing-host"),
        pytest.param("broker:abc", id="port-not-a-number"),
        pytest.param("broker:65536", id="port-too-big"),
        pytest.param("broker:-1", id="port-negative"),
        pytest.param("", id="empty"),
        pytest.param(None, id="none"),
        pytest.param(9092, id="int"),
    ],
)
def test_bad_host_port_is_rejected_naming_the_key(text: Any) -> None:
    with pytest.raises(ConfigError) as info:
        parse_host_port("upstream", text)
    assert info.value.key == "upstream"


def test_listen_may_be_just_a_port() -> None:
    assert parse_host_port("listen", "9092", default_host="127.0.0.1") == HostPort(
        "127.0.0.1", 9092
    )
    assert load_config(None, {"listen": "9500"}).listen == HostPort("127.0.0.1", 9500)


@pytest.mark.parametrize(
    "address", [HostPort("::1", 9092), HostPort("broker", 1), HostPort("fe80::1%eth0", 5)]
)
def test_host_port_prints_in_a_form_it_parses_back(address: HostPort) -> None:
    assert parse_host_port("k", str(address)) == address
    assert str(HostPort("::1", 9092)) == "[::1]:9092"


# -- the declarations ----------------------------------------------------------------------


def test_every_flag_sets_the_key_that_declares_it_and_every_key_flag_is_declared() -> None:
    from gateway.cli import build_parser
    from gateway.config.flags import flag_dest

    parser = build_parser()
    options = {
        option: action.dest
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and not option.startswith("--no-")
    }
    declared = {d.setting.flag: key for key, d in SETTINGS.items() if d.setting.flag}
    assert set(options) - set(declared) == {"--config", "--help", "--version"}
    for flag, key in declared.items():
        assert options[flag] == flag_dest(flag), (flag, key)


def test_every_key_is_declared_with_a_reason_and_a_toml_place_of_its_own() -> None:
    places = [d.toml for d in SETTINGS.values()]
    assert len(places) == len(set(places))
    for key, declared in SETTINGS.items():
        assert declared.setting.why.strip(), key
        table = declared.setting.table
        # At the top level the key is its own name; in a table, the name there less the
        # table's (tls_cert is [tls] cert), or "enabled" for the key named like the table.
        assert (
            table is None
            or key in (table, f"{table}_{declared.setting.name}")
            or (table in ("sidecar", "cluster") and key == declared.setting.name)
        ), key


@pytest.mark.parametrize("key", sorted(SETTINGS))
def test_every_key_is_read_from_its_toml_place(tmp_path: Path, key: str) -> None:
    # Written where the declaration says, a value lands on that key: its default comes
    # back, and where the default has no TOML spelling (None, {}), a value of no key's
    # type (a float) is refused naming the key.
    default = getattr(Config(), key)
    table, name = SETTINGS[key].setting.table, SETTINGS[key].setting.name
    value = _toml_value(default)
    line = f"{key if table is None else name} = {value or 1.5}\n"
    path = write(tmp_path, line if table is None else f"[{table}]\n{line}")
    if value is None:
        assert error_key(path) == key
    else:
        assert getattr(load_config(path), key) == default


def _toml_value(value: Any) -> str | None:
    if value is None or value == {}:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, HostPort):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


# -- settings an operator expects in the environment ------------------------------------


def test_embedded_home_and_cache_dir_default_to_their_variables_and_the_file_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_GATEWAY_HOME", "/srv/gateway")
    monkeypatch.setenv("XDG_CACHE_HOME", "/srv/cache")
    cfg = load_config()
    assert (cfg.embedded_home, cfg.cache_dir) == ("/srv/gateway", "/srv/cache/kafka-gateway")
    cfg = load_config(write(tmp_path, 'embedded_home = "/data"\ncache_dir = "/jars"\n'))
    assert (cfg.embedded_home, cfg.cache_dir) == ("/data", "/jars")
    monkeypatch.setenv("KAFKA_GATEWAY_HOME", "")  # empty is unset: a temporary directory
    monkeypatch.delenv("XDG_CACHE_HOME")
    cfg = load_config()
    assert cfg.embedded_home is None
    assert cfg.cache_dir == str(Path.home() / ".cache" / "kafka-gateway")


def test_the_stack_and_the_jar_cache_use_the_configured_folders(tmp_path: Path) -> None:
    from gateway.server.apache_kafka import jars_dir
    from gateway.server.embedded import default_workdir

    assert default_workdir(str(tmp_path)) == (tmp_path, False)
    scratch, temporary = default_workdir(None)
    assert temporary and scratch.is_dir()
    scratch.rmdir()
    assert jars_dir("4.4.0", str(tmp_path)) == tmp_path / "apache-kafka-4.4.0"
