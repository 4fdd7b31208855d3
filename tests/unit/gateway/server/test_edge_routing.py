"""SNI names and advertised overrides in every address the gateway rewrites (Metadata,
FindCoordinator, DescribeCluster, KIP-951 NodeEndpoints), the [sni] / [cluster] /
unknown_api_keys settings, and the SNI route table. The real routers and config;
responses built with kio as in test_addresses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trustme

from gateway.cli import main
from gateway.config import Config, ConfigError, HostPort, load_config, sni_node_id
from gateway.observability.metrics import Metrics
from gateway.server.routing import ClusterRouter, SidecarRouter
from gateway.server.sni import Route, SniRouter
from tests.unit.gateway.interceptors.test_addresses import (
    ENDPOINTS,
    NODE_ENDPOINT_CASES,
    UNCHANGED_CASES,
    build,
    metadata,
    response_cls,
    rewrite,
)

PATTERN = "broker-{node_id}.kafka.example"
UPSTREAM = HostPort("10.0.0.1", 9092)


def sni_config(**changes: Any) -> Config:
    values: dict[str, Any] = {
        "mode": "cluster",
        "upstream": UPSTREAM,
        "sni_broker_host": PATTERN,
        "sni_bootstrap_host": "bootstrap.kafka.example",
        "advertised_port": 443,
    }
    return Config(**{**values, **changes})


class Opened:
    """Records the per-broker listeners a ClusterRouter asks for."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, HostPort]] = []

    def __call__(self, node_id: int, address: HostPort) -> None:
        self.calls.append((node_id, address))


def addresses(entity: Any, router: Any) -> list[tuple[str, int]]:
    """Every (host, port) a rewritten response carries, wherever it keeps them."""
    _, _, decoded = rewrite(entity, router)
    found: list[tuple[str, int]] = []
    for name in ("brokers", "node_endpoints", "coordinators"):
        found += [(item.host, item.port) for item in getattr(decoded, name, ())]
    if hasattr(decoded, "host"):
        found.append((decoded.host, decoded.port))
    return found


RESPONSES = [
    *UNCHANGED_CASES,  # Metadata, FindCoordinator single and batched, Produce, Fetch
    (
        "describe_cluster-v1",
        lambda: build(
            response_cls("describe_cluster", 1),
            cluster_id="c",
            controller_id=1,
            brokers=[{"broker_id": 1, "host": "b1", "port": 9093}],
        ),
    ),
    *((name, lambda make=make: make(ENDPOINTS)) for name, make in NODE_ENDPOINT_CASES),
]


@pytest.mark.parametrize("make", [r[1] for r in RESPONSES], ids=[r[0] for r in RESPONSES])
def test_sni_mode_advertises_every_broker_by_name_on_the_shared_port(make: Any) -> None:
    opened = Opened()
    router = ClusterRouter(sni_config(), opened)
    found = addresses(make(), router)
    assert found
    for host, port in found:
        assert port == 443
        node_id = sni_node_id(PATTERN, host)
        assert node_id is not None and host == f"broker-{node_id}.kafka.example"
    assert opened.calls == []  # no listener per broker: the one port serves them all


@pytest.mark.parametrize("make", [r[1] for r in RESPONSES], ids=[r[0] for r in RESPONSES])
@pytest.mark.parametrize("sni", [True, False], ids=["sni", "port-per-broker"])
def test_a_per_broker_override_wins_everywhere(make: Any, sni: bool) -> None:
    overrides = {n: HostPort(f"lb-{n}.example", 30000 + n) for n in (0, 1, 2, 3, 7)}
    config = sni_config(advertised_brokers=overrides)
    if not sni:
        config = Config(mode="cluster", upstream=UPSTREAM, advertised_brokers=overrides)
    found = addresses(make(), ClusterRouter(config, Opened()))
    assert found and all(
        host.startswith("lb-") and port == 30000 + int(host[3]) for host, port in found
    )


def test_sidecar_advertises_its_advertised_port() -> None:
    config = Config(upstream=UPSTREAM, advertised_host="gw.example", advertised_port=31092)
    found = addresses(metadata(12), SidecarRouter(config))
    assert set(found) == {("gw.example", 31092)}


def test_port_per_broker_listeners_dial_broker_upstreams_over_what_brokers_advertise() -> None:
    pinned = HostPort("127.0.0.1", 29092)
    opened = Opened()
    router = ClusterRouter(Config(mode="cluster", broker_upstreams={1: pinned}), opened)
    assert router.advertise(1, "unreachable.invalid", 9092) == ("127.0.0.1", 9093 + 1)
    assert router.advertise(2, "b2", 9092) == ("127.0.0.1", 9093 + 2)
    assert opened.calls == [(1, pinned), (2, HostPort("b2", 9092))]
    assert router.upstream_for(1) == pinned
    with pytest.raises(KeyError):
        router.upstream_for(3)


def test_a_cluster_routers_generation_moves_only_with_what_it_learns() -> None:
    """A rewrite remembered at one generation holds while it does (AddressBook):
    asking again what was asked changes nothing, a broker learnt or moved does."""
    opened = Opened()
    router = ClusterRouter(Config(mode="cluster", upstream=UPSTREAM), opened)
    router.advertise(1, "b1", 9092)
    router.advertise(2, "b2", 9092)
    learnt = router.generation
    assert learnt == 2
    for _ in range(3):
        router.advertise(1, "b1", 9092)
        router.advertise(2, "b2", 9092)
    assert router.generation == learnt and len(opened.calls) == 2
    router.advertise(1, "b1-moved", 9092)
    assert router.generation == learnt + 1
    # The old head asked again moves broker 1 back: a change, so a new generation.
    router.advertise(1, "b1", 9092)
    assert router.generation == learnt + 2 and len(opened.calls) == 4


# -- the SNI route table ---------------------------------------------------------------


# What the bootstrap name falls back to, in node id order: learned 1, pinned 5.
KNOWN = (HostPort("10.0.0.11", 9092), HostPort("10.0.0.5", 9092))


SNI_CONFIG = sni_config(broker_upstreams={5: HostPort("10.0.0.5", 9092)})


@pytest.fixture
def router() -> ClusterRouter:
    router = ClusterRouter(SNI_CONFIG, Opened())
    router.advertise(1, "10.0.0.11", 9092)  # learned from Metadata
    return router


@pytest.fixture
def sni(router: ClusterRouter) -> SniRouter:
    return SniRouter(SNI_CONFIG, router, Metrics())


@pytest.mark.parametrize(
    ("name", "route"),
    [
        ("bootstrap.kafka.example", Route("bootstrap", UPSTREAM, KNOWN)),
        ("Bootstrap.Kafka.Example", Route("bootstrap", UPSTREAM, KNOWN)),
        ("broker-1.kafka.example", Route("broker-1", HostPort("10.0.0.11", 9092))),
        ("BROKER-5.kafka.example", Route("broker-5", HostPort("10.0.0.5", 9092))),
        # Fits the pattern, not known yet: looked up in the bootstrap upstream's Metadata.
        ("broker-2.kafka.example", Route("broker-2", UPSTREAM, unknown_node=2)),
        ("broker-01.kafka.example", "unknown_server_name"),  # not how 1 is advertised
        ("broker-.kafka.example", "unknown_server_name"),
        ("broker-1x.kafka.example", "unknown_server_name"),
        ("broker-1.kafka.example.evil", "unknown_server_name"),
        ("kafka.example", "unknown_server_name"),
        (None, "missing_server_name"),
    ],
)
def test_server_names_route_to_their_broker_or_say_why_not(
    sni: SniRouter, name: str | None, route: Route | str
) -> None:
    assert sni.route(name) == route


def test_the_bootstrap_upstream_is_not_its_own_fallback(
    sni: SniRouter, router: ClusterRouter
) -> None:
    router.advertise(2, UPSTREAM.host, UPSTREAM.port)
    route = sni.route("bootstrap.kafka.example")
    assert isinstance(route, Route) and route.fallbacks == KNOWN


def test_sni_node_id_reads_only_the_advertised_spelling() -> None:
    assert sni_node_id("b{node_id}", "b0") == 0
    assert sni_node_id("{node_id}.k", "12.k") == 12
    assert sni_node_id("b{node_id}", "b") is None
    assert sni_node_id("b{node_id}", "b٣") is None  # a non-ASCII digit is no node id


# -- settings ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("pki") / "server.pem"
    leaf = trustme.CA().issue_cert("*.kafka.example")
    leaf.private_key_and_cert_chain_pem.write_to_path(str(path))
    return str(path)


def test_the_edge_tables_load_from_toml(tmp_path: Path, cert: str) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(
        f"""
mode = "cluster"
advertised_port = 443
unknown_api_keys = "forward"
[tls]
cert = "{cert}"
[sni]
broker_host = "{PATTERN}"
bootstrap_host = "kafka.example"
[cluster.advertised_brokers]
1 = "lb.example:31001"
[cluster.broker_upstreams]
1 = "10.0.0.1:9092"
"""
    )
    cfg = load_config(path)
    assert cfg.sni_broker_host == PATTERN and cfg.sni_bootstrap == "kafka.example"
    assert cfg.advertised_listen_port == 443
    assert cfg.advertised_brokers == {1: HostPort("lb.example", 31001)}
    assert cfg.broker_upstreams == {1: HostPort("10.0.0.1", 9092)}
    assert cfg.unknown_api_keys == "forward"


@pytest.mark.parametrize(
    ("settings", "key", "reason"),
    [
        ({"unknown_api_keys": "drop"}, "unknown_api_keys", "close or forward"),
        ({"advertised_port": 0}, "advertised_port", "1-65535"),
        ({"mode": "sidecar", "broker_upstreams": {"1": "b:1"}}, "broker_upstreams", "cluster"),
        ({"advertised_brokers": {"1": "nope"}}, "advertised_brokers.1", "HOST:PORT"),
        ({"tls_cert": None}, "sni.broker_host", "tls.cert"),
        ({"sni_broker_host": "broker.kafka.example"}, "sni.broker_host", "{node_id} once"),
        ({"sni_broker_host": "b{node_id}-{node_id}.k"}, "sni.broker_host", "{node_id} once"),
        ({"sni_broker_host": "b{node_id}.{zone}.k"}, "sni.broker_host", "{node_id} once"),
        ({"sni_broker_host": "b_{node_id}.k"}, "sni.broker_host", "DNS names"),
        ({"sni_bootstrap_host": "broker-3.kafka.example"}, "sni.bootstrap_host", "pattern"),
        ({"sni_broker_host": None}, "sni.bootstrap_host", "needs sni.broker_host"),
    ],
)
def test_bad_edge_settings_name_the_key(cert: str, settings: dict, key: str, reason: str) -> None:
    raw: dict[str, Any] = {
        "mode": "cluster",
        "tls_cert": cert,
        "sni_broker_host": PATTERN,
        "sni_bootstrap_host": "bootstrap.kafka.example",
        **settings,
    }
    with pytest.raises(ConfigError) as caught:
        load_config(None, raw)
    assert caught.value.key == key
    assert reason in caught.value.reason


def test_node_flags_need_node_equals_address(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--mode", "cluster", "--advertise-broker", "lb.example:9092"]) == 2
    assert "--advertise-broker: expected NODE=HOST:PORT" in capsys.readouterr().err
