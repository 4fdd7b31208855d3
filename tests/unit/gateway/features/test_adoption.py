"""A fresh fleet adopts its brokers' finalized levels, once (gateway.features.adoption,
FeatureStore.adopt, gateway.server.broker_levels), against a real ZooKeeper.

The integration side (a KIP-848 consumer and a transactional producer through a gateway
in front of Apache Kafka 4.4, with nothing finalized by hand) is in
tests/integration/test_adopt_broker_features.py.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from gateway.config import load_config
from gateway.features.adoption import THIS_GATEWAY, plan_adoption
from gateway.features.catalogue import load_catalogue
from gateway.features.report import NO_FEATURES, FeatureReport
from gateway.features.store import FeatureStore, make_client
from gateway.features.znode import NO_EPOCH, Registration
from gateway.observability.metrics import Metrics
from gateway.server.features import FeatureGate
from gateway.versions import gateway_supported
from tests.harness import ZooKeeperProcess

CATALOGUE = load_catalogue(None)
UPSTREAM = "broker-0:9092"

# What a freshly formatted Apache Kafka 4.4 reports (levels seen on a real broker).
KAFKA_44 = FeatureReport(
    supported={
        "metadata.version": (7, 33),
        "kraft.version": (0, 1),
        "group.version": (0, 1),
        "transaction.version": (0, 2),
        "share.version": (0, 2),
        "eligible.leader.replicas.version": (0, 1),
        "streams.version": (0, 1),
    },
    finalized={
        "metadata.version": 33,
        "group.version": 1,
        "transaction.version": 2,
        "share.version": 2,
    },
    epoch=120,
)
OURS = {name: (0, spec.max_level) for name, spec in CATALOGUE.items()}
ADOPTED_44 = {"group.version": 1, "transaction.version": 2, "share.version": 1}


# -- the rules ---------------------------------------------------------------------------


def test_catalogue_features_are_adopted_at_the_level_every_live_gateway_supports() -> None:
    plan = plan_adoption(KAFKA_44, CATALOGUE, OURS, {})
    assert plan.levels == ADOPTED_44
    # metadata.version is the brokers' alone, as featurectl --release-version skips it.
    assert "not in the gateways' feature catalogue" in plan.skipped["metadata.version"]
    # The built-in catalogue lists share.version 1: lowered, and said so.
    assert plan.skipped["share.version"] == (
        f"finalized 2; adopted 1, the highest level {THIS_GATEWAY} supports"
    )
    assert set(plan.skipped) == {"metadata.version", "share.version"}


def test_a_live_gateway_that_cannot_serve_a_level_lowers_or_blocks_it() -> None:
    older = {
        "gw-old": {"group.version": (0, 0), "transaction.version": (0, 1), "share.version": (0, 1)}
    }
    plan = plan_adoption(KAFKA_44, CATALOGUE, OURS, older)
    assert plan.levels == {"transaction.version": 1, "share.version": 1}
    assert plan.skipped["group.version"] == "finalized 1; gw-old cannot serve level 1"
    assert plan.skipped["transaction.version"] == (
        "finalized 2; adopted 1, the highest level gw-old supports"
    )


def test_nothing_is_adopted_from_a_broker_that_finalized_nothing_the_gateways_gate() -> None:
    kraft_only = FeatureReport(KAFKA_44.supported, {"metadata.version": 33}, 7)
    assert plan_adoption(kraft_only, CATALOGUE, OURS, {}).levels == {}


# -- the store: one create across a fleet ------------------------------------------------


@pytest.fixture
def chroot() -> str:
    return f"/adopt-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def store(zookeeper: ZooKeeperProcess, chroot: str) -> Iterator[FeatureStore]:
    client = make_client(zookeeper.connect_string)
    client.start(timeout=15)
    try:
        yield FeatureStore(client, chroot)
    finally:
        client.stop()
        client.close()


def adopted_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in logs if line["event"] == "features.adopted"]


def test_gateways_starting_at_once_adopt_once(zookeeper: ZooKeeperProcess, chroot: str) -> None:
    clients = [make_client(zookeeper.connect_string) for _ in range(4)]
    results: list[int | None] = []
    start = threading.Barrier(len(clients))

    def gateway(store: FeatureStore) -> None:
        start.wait()
        who = {"principal": "kafka-gateway", "address": "gw"}
        results.append(store.adopt(ADOPTED_44, upstream=UPSTREAM, skipped={}, who=who))

    with structlog.testing.capture_logs() as logs:
        for client in clients:
            client.start(timeout=15)
        threads = [
            threading.Thread(target=gateway, args=(FeatureStore(c, chroot),)) for c in clients
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        levels = FeatureStore(clients[0], chroot).read()
        for client in clients:
            client.stop()
            client.close()
    assert sorted(results, key=str) == [0, None, None, None]
    assert levels.levels == ADOPTED_44 and levels.epoch == 0
    [audit] = adopted_lines(logs)
    assert audit["new_levels"] == ADOPTED_44
    assert audit["upstream"] == UPSTREAM
    assert audit["epoch"] == "-1 -> 0"
    assert audit["changes"]["transaction.version"] == "0 -> 2"


def test_a_store_an_operator_emptied_is_never_adopted_into(store: FeatureStore) -> None:
    epoch = store.write({"group.version": 1}, NO_EPOCH)
    store.write({}, epoch, old={"group.version": 1})  # featurectl disable
    with structlog.testing.capture_logs() as logs:
        assert store.adopt(ADOPTED_44, upstream=UPSTREAM, skipped={}, who={}) is None
    assert store.read().levels == {} and adopted_lines(logs) == []


# -- the gateway: adopts at start, before its first client --------------------------------


def gate(
    zookeeper: ZooKeeperProcess, chroot: str, *, name: str = "gw-0", **cfg: Any
) -> FeatureGate:
    config = load_config(
        None,
        {
            "upstream": "127.0.0.1:9092",
            "zookeeper": zookeeper.connect_string,
            "zookeeper_chroot": chroot,
            **cfg,
        },
    )
    metrics = Metrics()
    holder: list[FeatureGate] = []

    def registration() -> Registration:
        g = holder[0]
        return Registration(
            name,
            f"{name}:9092",
            UPSTREAM,
            dict(g.supported or {}),
            broker_finalized=g.brokers.finalized(),
        )

    g = FeatureGate(config, metrics, lambda: None, registration)
    holder.append(g)
    return g


async def started(g: FeatureGate, report: FeatureReport = KAFKA_44) -> FeatureGate:
    """What Gateway.start_control_plane does: the probe's answer, then ZooKeeper."""
    if report is not NO_FEATURES:
        g.set_available(UPSTREAM, gateway_supported(), report)
    await g.start()
    await g.register_now()
    return g


def test_a_fresh_fleet_adopts_at_start_and_the_next_gateway_adopts_nothing(
    zookeeper: ZooKeeperProcess, chroot: str, store: FeatureStore
) -> None:
    async def run() -> list[dict[str, Any]]:
        with structlog.testing.capture_logs() as logs:
            first = await started(gate(zookeeper, chroot))
            assert dict(first.finalized.levels) == ADOPTED_44 and first.finalized.epoch == 0
            second = await started(gate(zookeeper, chroot, name="gw-1"))
            assert second.finalized == first.finalized
            await second.stop()
            await first.stop()
        return logs

    logs = asyncio.run(run())
    assert [line["upstream"] for line in adopted_lines(logs)] == [UPSTREAM]
    assert adopted_lines(logs)[0]["skipped"].keys() == {"metadata.version", "share.version"}
    assert store.read().epoch == 0  # written once


def test_adoption_is_on_by_default() -> None:
    assert load_config(None, {}).adopt_broker_features is True


def test_adoption_is_off_with_the_key_and_in_a_worker(
    zookeeper: ZooKeeperProcess, chroot: str, store: FeatureStore
) -> None:
    async def run() -> None:
        off = await started(gate(zookeeper, chroot, adopt_broker_features=False))
        worker = gate(zookeeper, chroot, name="gw-w")
        worker.registers = False  # the supervisor holds the registration, and adopts
        await started(worker)
        for g in (off, worker):
            assert g.finalized.epoch == NO_EPOCH
            await g.stop()

    asyncio.run(run())
    assert store.read().epoch == NO_EPOCH


def test_a_gateway_whose_broker_was_down_at_start_adopts_when_it_answers(
    zookeeper: ZooKeeperProcess, chroot: str, store: FeatureStore
) -> None:
    async def run() -> None:
        g = await started(gate(zookeeper, chroot), NO_FEATURES)
        assert g.finalized.epoch == NO_EPOCH
        g.set_available(UPSTREAM, gateway_supported(), KAFKA_44)  # its first client's answer
        for _ in range(200):
            if g.finalized.epoch == 0:
                break
            await asyncio.sleep(0.05)
        assert dict(g.finalized.levels) == ADOPTED_44
        await g.stop()

    asyncio.run(run())
    assert store.read().levels == ADOPTED_44


def test_a_level_the_brokers_hold_above_the_store_is_measured_logged_and_registered(
    zookeeper: ZooKeeperProcess, chroot: str, store: FeatureStore
) -> None:
    # The operator's store: transaction.version only (group.version disabled on purpose).
    store.write({"transaction.version": 2, "share.version": 1}, NO_EPOCH)

    async def run() -> list[dict[str, Any]]:
        with structlog.testing.capture_logs() as logs:
            g = await started(gate(zookeeper, chroot))
            for _ in range(3):  # every connection's answer: one line per change
                g.set_available(UPSTREAM, gateway_supported(), KAFKA_44)
            metric = g.metrics.feature_broker_finalized
            assert metric.labels("group.version", UPSTREAM)._value.get() == 1
            assert metric.labels("share.version", UPSTREAM)._value.get() == 2
            [registration] = store.registrations()
            assert registration.broker_finalized == KAFKA_44.finalized
            await g.stop()
        return logs

    logs = asyncio.run(run())
    assert adopted_lines(logs) == []
    ahead = {line["feature"]: line for line in logs if line["event"] == "features.broker_ahead"}
    assert set(ahead) == {"group.version", "share.version"}
    assert ahead["group.version"]["log_level"] == "warning"
    assert ahead["group.version"]["action"] == "featurectl finalize --feature group.version=1"
    # share.version 2 is beyond this gateway's catalogue: said, not alarmed.
    assert ahead["share.version"]["log_level"] == "info"
    assert sum(line["event"] == "features.broker_ahead" for line in logs) == 2
