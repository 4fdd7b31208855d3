"""collect → plan end to end: real ZooKeeper, real gateways, real clients, real Spark.

Two gateways register in ZooKeeper with their /metrics URL; gateway "a" knows both
levels of ``test.version``, gateway "b" only level 1 (as in test_features.py, the
catalogue gates versions the Tansu broker really has: level 1 DescribeCluster v1,
level 2 Metadata v12). Level 1 is finalized. While ``featurectl collect`` scrapes every
second (until SIGTERM), confluent-kafka produces and consumes through "a", and a tool identifying
itself with KIP-511 sends DescribeCluster v1 (the gated version) through "b".

The same tool also asks gateway "a" for Metadata v12, which level 2 gates: refused
(gated_by_feature), like a client that wants a feature it cannot get.

``featurectl plan`` must then say: finalizing level 2 is blocked by gateway "b"; the
tool is the client still using what level 1 enables; confluent-kafka-python's Produce
requests were counted; the refusals appear in the plan: attributed to the tool, as
wanting test.version=2, where the gateway labels refusals by API and client, else as
refusals nobody can attribute (an older gateway's counter has only a reason).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.dataset
import pytest
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.metadata.v12.request import MetadataRequest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from featurectl.plan.columnar import SAMPLES
from featurectl.plan.layout import SCRAPES
from gateway.commands import shell_command
from gateway.features.store import FeatureStore
from gateway.features.znode import Registration
from tests.conftest import GatewayFactory
from tests.harness import (
    GatewayProcess,
    KafkaConnection,
    TansuBroker,
    ZooKeeperProcess,
    free_port,
)
from tests.harness.featurectl_collect import environ_without_zookeeper, featurectl_collect, rounds
from tests.harness.featurectl_plan import featurectl_plan
from tests.harness.kafka_wire import parse_features
from tests.integration.conftest import CHROOT
from tests.integration.test_clients import ConfluentDriver
from tests.integration.test_features import (
    CATALOGUE_A,
    CATALOGUE_B,
    FEATURE,
    start_gateway,
    wait_for,
)

# How the plan's commands name featurectl, run from here (gateway.commands).
FEATURECTL = shell_command("featurectl")

DESCRIBE_CLUSTER = 60
METADATA = 3
# What the harness's raw connection announces in ApiVersions v3 (KIP-511).
TOOL = ("kafka-gateway-tests", "1")
RUN_TIMEOUT_S = 300

pytestmark = pytest.mark.slow


@pytest.fixture
def broker(tansu_broker: TansuBroker) -> TansuBroker:
    """Tansu, whatever the session's broker: these pin the gateways' own levels (a gateway
    serves level 1 exactly when the features it reports are ``test.version`` alone), and a
    broker that reports no features of its own (Tansu) keeps them apart; the catalogue
    also gates versions picked for Tansu. tests/integration/test_upstream_features.py
    covers the merge with Kafka's."""
    return tansu_broker


def serves_level_1(gw: GatewayProcess) -> bool:
    with KafkaConnection(gw.host, gw.port) as conn:
        return parse_features(conn.api_versions(4)).finalized == {FEATURE: (1, 1)}


def describe_cluster_v1(gw: GatewayProcess, times: int) -> None:
    """DescribeCluster v1 (needs test.version=1) from a client that says who it is."""
    with KafkaConnection(gw.host, gw.port) as conn:
        conn.api_versions(3)  # announces TOOL
        for _ in range(times):
            response = conn.request(
                DESCRIBE_CLUSTER,
                1,
                DescribeClusterRequest(include_cluster_authorized_operations=False),
            )
            # throttle_time_ms int32, then error_code: 0 while the level is finalized.
            assert response.body[4:6] == b"\x00\x00"


def metadata_v12(gw: GatewayProcess, times: int) -> None:
    """Metadata v12 (needs test.version=2, not finalized): refused, UNSUPPORTED_VERSION."""
    with KafkaConnection(gw.host, gw.port) as conn:
        conn.api_versions(3)  # announces TOOL
        for _ in range(times):
            response = conn.request(
                METADATA,
                12,
                MetadataRequest(
                    topics=None,
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                ),
            )
            # throttle_time_ms int32, then the brokers array; the refusal is a top-level
            # UNSUPPORTED_VERSION somewhere in it: the count is what the plan reads.
            assert response.body


def env() -> dict[str, str]:
    return {**environ_without_zookeeper(), "PYSPARK_PYTHON": sys.executable}


def test_collect_then_plan_with_real_gateways_and_clients(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    unique_topic: str,
    tmp_path: Path,
) -> None:
    a = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-a", CATALOGUE_A)
    b = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-b", CATALOGUE_B)
    wait_for(lambda: len(store.registrations()) == 2, what="both registrations")
    assert all(r.metrics_url for r in store.registrations())
    current = store.read()
    store.write({FEATURE: 1}, current.epoch)
    for gw in (a, b):
        wait_for(lambda gw=gw: serves_level_1(gw), what=f"{gw.name} serving level 1")

    metrics = tmp_path / "metrics"
    with featurectl_collect(zookeeper.connect_string, CHROOT, metrics, "--interval", "1"):
        # Traffic after the first round, so the counters grow inside the window.
        # The Parquet writer buffers; a round's state snapshot says the round ran.
        wait_for(lambda: rounds(metrics) >= 1, what="the first round")
        client = ConfluentDriver()
        client.create_topic(a.bootstrap, unique_topic)
        client.produce(a.bootstrap, unique_topic, [b"a", b"b", b"c", b"d"], acks="all")
        assert client.consume_assigned(a.bootstrap, unique_topic, 4) == [b"a", b"b", b"c", b"d"]
        describe_cluster_v1(b, times=3)
        metadata_v12(a, times=3)
        # Two more rounds, so a scrape surely saw all of it; then stop as an operator does.
        done = rounds(metrics)
        wait_for(lambda: rounds(metrics) >= done + 2, what="rounds")
    # Written at SIGTERM: one scrape per gateway and round, each at its round's time.
    samples = pyarrow.dataset.dataset(metrics / SAMPLES, partitioning="hive").to_table()
    scrapes = set(zip(samples["gateway_id"].to_pylist(), samples["ts"].to_pylist(), strict=True))
    assert len(scrapes) == 2 * rounds(metrics)

    catalogue = tmp_path / "gw-a.toml"
    plan_dir = tmp_path / "plan"
    # Exits 1: written, and the target is not safe (gw-b supports level 1 only).
    plan = featurectl_plan(
        metrics,
        plan_dir,
        "--zookeeper",
        zookeeper.connect_string,
        "--chroot",
        CHROOT,
        "--catalogue",
        str(catalogue),
        "--target",
        f"{FEATURE}=2",
        "--master",
        "local[1]",
        env=env(),
        timeout_s=RUN_TIMEOUT_S,
    )

    assert plan["state"]["source"] == "zookeeper"
    assert sorted(plan["state"]["gateway_ids"]) == ["gw-a", "gw-b"]
    assert plan["dataset"]["gateways"] == 2
    (feature,) = plan["features"]
    assert (feature["finalized_level"], feature["cluster_max_level"]) == (1, 1)
    (verdict,) = plan["verdicts"]
    assert (verdict["kind"], verdict["safe"], verdict["blocking_gateways"]) == (
        "upgrade",
        False,
        ["gw-b"],
    )
    finalize = [s["command"] for s in plan["steps"] if s["kind"] == "command"]
    assert finalize == [
        f"{FEATURECTL} finalize --zookeeper {zookeeper.connect_string} --chroot {CHROOT} "
        f"--feature {FEATURE}=2"
    ]

    tool = [
        c
        for c in plan["clients"]
        if (c["client_software_name"], c["client_software_version"]) == TOOL
    ]
    # requests_total counts what clients asked for, refused or not: the Metadata v12
    # that gw-a refused is there too, needing level 2.
    assert sorted((c["api"], c["api_version"], c["feature"], c["level"]) for c in tool) == [
        ("DescribeCluster", 1, FEATURE, 1),
        ("Metadata", 12, FEATURE, 2),
    ]
    (describe,) = [c for c in tool if c["api"] == "DescribeCluster"]
    assert describe["requests"] >= 3 and describe["gateways"] == ["gw-b"]
    assert describe["last_seen"] is not None

    produce = [
        u
        for u in plan["api_usage"]
        if u["api"] == "Produce" and u["client_software_name"] == "confluent-kafka-python"
    ]
    assert produce and sum(u["requests"] for u in produce) >= 1
    assert all(u["gateways"] == ["gw-a"] for u in produce)
    for chart in plan["charts"]:
        assert (plan_dir / chart).stat().st_size > 0
    report = (plan_dir / "report.md").read_text()
    assert report.startswith("# kafka-gateway feature plan")

    # Why level 2 is capped: gw-b, named with the API version it lacks.
    (capped,) = [b for b in plan["blocking_gateways"] if b["gateway_id"] == "gw-b"]
    assert "Metadata v12+" in capped["reason"], capped
    # Its own catalogue stops at level 1: gw-a, through the same Tansu, supports level 2.
    assert capped["cap"] == "catalogue", capped
    assert "its own catalogue caps it, not its upstream (gw-a supports" in capped["reason"]
    # The refused Metadata v12: attributed where the gateway labels refusals.
    refused = [r for r in plan["refusals"] if r["reason"] == "gated_by_feature"]
    assert refused and sum(r["requests"] for r in refused) >= 3, plan["refusals"]
    if any(r["api_key"] not in (None, -1) for r in refused):
        (wants,) = [
            w
            for w in plan["wanting"]
            if (w["client_software_name"], w["client_software_version"]) == TOOL
        ]
        assert (wants["api"], wants["api_version"], wants["feature"], wants["level"]) == (
            "Metadata",
            12,
            FEATURE,
            2,
        )
        assert wants["command"] is None  # gw-b cannot serve level 2 yet
        assert "## Clients that want a feature they cannot get" in report
    else:
        assert any(r["reason"] == "gated_by_feature" for r in plan["broken_now"])
        assert "## Broken now" in report and "by reason only" in report


def test_collect_keeps_scraping_the_known_gateways_while_zookeeper_is_down(
    zookeeper: ZooKeeperProcess, store: FeatureStore, tmp_path: Path
) -> None:
    """An outage is when an operator most wants metrics: no snapshot, scrapes go on."""
    registry = CollectorRegistry()
    Gauge("kafka_gateway_feature_finalized_epoch", "epoch", registry=registry).set(3)
    port = free_port()
    server, _ = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        store.register(
            Registration(
                "gw-x",
                "gw-x:9092",
                "broker:9093",
                {},
                metrics_url=f"http://127.0.0.1:{port}/metrics",
            )
        )
        metrics = tmp_path / "metrics"
        # Text: each round's files appear at once (Parquet buffers), which this test counts.
        options = ("--interval", "0.5", "--timeout", "2", "--format", "text")
        with featurectl_collect(zookeeper.connect_string, CHROOT, metrics, *options) as collect:
            wait_for(lambda: rounds(metrics) >= 1, what="a first round")
            zookeeper.stop()
            scraped = len(list((metrics / SCRAPES).glob("*/*.prom")))
            wait_for(
                lambda: len(list((metrics / SCRAPES).glob("*/*.prom"))) >= scraped + 3,
                timeout=30,
                what="scrapes during the outage",
            )
    finally:
        server.shutdown()
        server.server_close()
    assert "cannot read ZooKeeper this round" in collect.stderr
    scraped_rounds = {p.parent.name for p in (metrics / SCRAPES).glob("*/*.prom")}
    # Rounds during the outage have scrapes but no state snapshot.
    assert rounds(metrics) < len(scraped_rounds)
