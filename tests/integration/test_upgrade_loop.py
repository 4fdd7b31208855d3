"""The operator's loop, closed for every client (issue 31's done-when): see who is
refused, plan with reasons, change the levels with the plan's own commands, and check
each client against what the plan said of it.

Real ZooKeeper, Apache Kafka 4.x, one gateway process, featurectl collect and plan
(real Spark), and five clients of four libraries:

- confluent-kafka (librdkafka; KIP-511 name) producing continuously, idempotent, acks=all,
  on Produce v10+, which ``test.version`` 1 gates;
- confluent-kafka as a KIP-848 consumer (``group.protocol=consumer``), whose
  ConsumerGroupHeartbeat ``test.group.version`` 1 gates;
- kafka-python pinned to api_version (0, 10): Produce v2, which Kafka 4 removed, so it
  is broken now; it sends no ApiVersions, hence no KIP-511 name (known by its client id);
- kafka-python unpinned, and aiokafka: produce and consume before and after.

The plan targets both features at 0. Its claims, checked against the clients:
kafka-python (0, 10) is broken now, with the reason and remedy; disabling
``test.version`` only makes the producer reconnect (it keeps delivering, no record lost);
disabling ``test.group.version`` takes the KIP-848 consumer's API away, so it is named as
the client to move before that step. Every command the plan prints runs as printed from
the repository root, twice (the second run changes nothing and exits 0).
"""

from __future__ import annotations

import subprocess
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from featurectl.plan.layout import STATE
from gateway.features.store import FeatureStore
from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess, ZooKeeperProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.consumers import ContinuousConsumer
from tests.harness.featurectl_collect import featurectl_collect, rounds
from tests.harness.featurectl_plan import featurectl_plan
from tests.integration.conftest import CHROOT
from tests.integration.test_client_identities import (
    OLD_CLIENT_ID,
    OLD_IDENTITY,
    get_json,
    produce_pinned_0_10,
    refusing_config,
)
from tests.integration.test_clients import AIOKafkaDriver, KafkaPythonDriver
from tests.integration.test_features import finalize, start_gateway, wait_for
from tests.integration.test_plan_e2e import env
from tests.integration.test_upgrade_in_place import ContinuousProducer, create_topic

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = """
[features."test.version"]
levels.1 = ["Produce>=10"]

[features."test.group.version"]
levels.1 = ["ConsumerGroupHeartbeat"]
"""
CONFLUENT = "confluent-kafka-python"
# kafka-python (0, 10)'s client id, and the identity its requests are counted under.
LEGACY_CLIENT_ID, LEGACY = OLD_CLIENT_ID, OLD_IDENTITY
PLAN_TIMEOUT_S = 300


def kip848_consumer(bootstrap: str, topic: str) -> ContinuousConsumer:
    """A confluent-kafka consumer in a KIP-848 group, polling from a thread."""
    return ContinuousConsumer(
        bootstrap,
        topic,
        {
            "group.id": f"kip848-{uuid.uuid4().hex[:8]}",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        },
    )


def round_trip(driver: Any, bootstrap: str, topic: str, tag: str) -> bool:
    """Whether ``driver`` produced three records to a topic of its own and read them back."""
    topic = f"{topic}-{tag}"
    values = [f"{tag}-{i}".encode() for i in range(3)]
    try:
        create_topic(bootstrap, topic)
        driver.produce(bootstrap, topic, values, acks="all")
        return driver.consume_assigned(bootstrap, topic, 3) == values
    except Exception as exc:  # whatever the library raises: it did not keep working
        print(f"{type(driver).__name__} {tag}: {exc!r}")
        return False


def run_plan(zookeeper: ZooKeeperProcess, metrics: Path, catalogue: str, out: Path) -> Any:
    # Exits 1: written, and a target is not safe (the KIP-848 consumer would lose its API).
    return featurectl_plan(
        metrics,
        out,
        "--zookeeper",
        zookeeper.connect_string,
        "--chroot",
        CHROOT,
        "--catalogue",
        catalogue,
        "--target",
        "test.version=0",
        "--target",
        "test.group.version=0",
        "--master",
        "local[1]",
        env=env(),
        timeout_s=PLAN_TIMEOUT_S,
    )


def run_as_printed(command: str) -> subprocess.CompletedProcess[str]:
    """A plan's command line, in a shell at the repository root, as an operator pastes it."""
    return subprocess.run(
        command, shell=True, cwd=REPO, capture_output=True, text=True, env=env(), timeout=120
    )


def test_collect_plan_apply_and_every_client_as_the_plan_said(
    gateway_factory: GatewayFactory,
    apache_kafka: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    unique_topic: str,
    tmp_path: Path,
) -> None:
    if apache_kafka.zookeeper_mode:
        pytest.skip("needs Apache Kafka 4.x: Kafka 3.9 still accepts Produce v2")
    finalize(store, test_version=1, test_group_version=1)
    gw: GatewayProcess = start_gateway(
        gateway_factory,
        zookeeper,
        tmp_path,
        "gw-loop",
        CATALOGUE,
        "--config",
        refusing_config(tmp_path),  # the bridge refuses the pinned client: broken now
        upstream=apache_kafka.bootstrap,
    )
    catalogue = str(tmp_path / "gw-loop.toml")
    topic, side_topic = unique_topic, f"{unique_topic}-side"
    create_topic(gw.bootstrap, topic)
    create_topic(gw.bootstrap, side_topic)

    metrics = tmp_path / "metrics"
    # Collect runs until the plan's window is closed: SIGTERM, and it must exit 0.
    collecting = ExitStack()
    collecting.enter_context(featurectl_collect(zookeeper.connect_string, CHROOT, metrics,
                                                "--interval", "1"))  # fmt: skip
    producer = consumer = None
    try:
        wait_for(lambda: list((metrics / STATE).glob("*.json")), 30, "the first round")
        producer = ContinuousProducer(gw.bootstrap, topic).start()
        consumer = kip848_consumer(gw.bootstrap, topic)
        wait_for(lambda: len(consumer.values) > 20, 60, "the KIP-848 consumer's records")
        produce_pinned_0_10(gw.bootstrap, side_topic, seconds=4)  # refused: broken now
        assert round_trip(KafkaPythonDriver(), gw.bootstrap, side_topic, "kp-before")
        assert round_trip(AIOKafkaDriver(), gw.bootstrap, side_topic, "aio-before")
        done = rounds(metrics)
        wait_for(lambda: rounds(metrics) >= done + 3, 30, "rounds")
        collecting.close()

        plan = run_plan(zookeeper, metrics, catalogue, tmp_path / "plan")

        # -- what the plan says ---------------------------------------------------------
        broken = [b for b in plan["broken_now"] if b["client_software_name"] == LEGACY]
        assert [(b["api"], b["api_version"], b["reason"]) for b in broken] == [
            ("Produce", 2, "unsupported_version")
        ], plan["broken_now"]
        assert "upgrade the library or unpin its protocol version" in broken[0]["remedy"]
        assert LEGACY_CLIENT_ID in broken[0]["client_ids"]
        assert "127.0.0.1" in broken[0]["peers"]
        verdicts = {v["feature"]: v for v in plan["verdicts"]}
        reconnect = verdicts["test.version"]
        assert reconnect["safe"], reconnect
        assert CONFLUENT in {c["client_software_name"] for c in reconnect["reconnecting_clients"]}
        group = verdicts["test.group.version"]
        assert not group["safe"]
        moved = [x for x in group["losses"] if x["remedy"] == "switch"]
        assert [(x["client_software_name"], x["api"]) for x in moved] == [
            (CONFLUENT, "ConsumerGroupHeartbeat")
        ], group["losses"]
        by_client = {row["client_software_name"] for row in plan["api_versions_by_client"]}
        assert {CONFLUENT, LEGACY} <= by_client, by_client
        assert len(by_client) >= 4, by_client  # kafka-python and aiokafka too
        commands = [s for s in plan["steps"] if s["kind"] == "command"]
        assert [(s["feature"], s["safe_now"]) for s in commands] == [
            ("test.version", True),
            ("test.group.version", False),
        ]
        # The client to move is named before the step that takes its API.
        move = next(s for s in plan["steps"] if s["kind"] == "manual")
        assert move["feature"] == "test.group.version" and CONFLUENT in move["action"]
        assert move["step"] < commands[1]["step"]

        # -- the plan's commands, as printed, in order ------------------------------------
        acked_before = len(producer.acked)
        applied_at = time.time()
        first = run_as_printed(commands[0]["command"])
        assert first.returncode == 0, first.stderr
        sent_after = producer.sent
        wait_for(
            lambda: any(v >= sent_after for _, v in producer.acked),
            30,
            "a record sent after the first step acknowledged",
        )
        # The producer was named as one that reconnects: it keeps delivering.
        again = run_as_printed(commands[0]["command"])
        assert again.returncode == 0, again.stderr  # already done: a no-op
        assert "nothing to change" in again.stdout
        assert consumer.since(applied_at) > 0, "the KIP-848 consumer lost nothing yet"
        assert round_trip(KafkaPythonDriver(), gw.bootstrap, side_topic, "kp-after")
        assert round_trip(AIOKafkaDriver(), gw.bootstrap, side_topic, "aio-after")

        # Until then the KIP-848 consumer was fine; the plan said the next step breaks it.
        assert not [e for e in consumer.errors if "ConsumerGroupHeartbeat" in e]
        second = run_as_printed(commands[1]["command"])
        assert second.returncode == 0, second.stderr
        removed_at = time.time()
        offered = get_json(gw, "/clients")  # the gateway stays up and answers
        assert any(r["client_id"] == LEGACY_CLIENT_ID for r in offered)
        time.sleep(5)
        producer.stop()
        delivered = sorted(v for _, v in producer.acked)
    finally:
        collecting.close()  # a no-op once closed above
        if consumer is not None:
            consumer.stop()
    assert producer is not None and consumer is not None
    # The producer kept working: nothing lost or doubled across both level changes.
    assert producer.failed == []
    assert delivered == list(range(producer.sent))
    # The KIP-848 consumer lost its API, as the plan said (and why): librdkafka stops.
    assert [e for e in consumer.errors if "ConsumerGroupHeartbeat" in e], consumer.errors
    print(
        f"\nproducer: {producer.sent} sent, {acked_before} acknowledged before the first "
        f"step, largest gap {producer.largest_gap_s():.2f} s; KIP-848 consumer: "
        f"{len(consumer.values)} records, {consumer.since(removed_at)} after its API was "
        f"withdrawn, errors {sorted(set(consumer.errors))[:3]}"
    )
