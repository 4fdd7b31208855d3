"""Apache Kafka 3.9 in ZooKeeper mode on the ZooKeeper ensemble the gateways use (issue 30).

The gateway's FeatureZNode layout (``gateway/features/znode.py``) is Kafka 3.x's: under
its chroot a ZooKeeper-mode broker keeps the finalized features in ``/feature`` (epoch =
the znode's data version) and registers in ``/brokers/ids/<id>`` with the features it
supports. These tests hold the gateway's reader, writer and rules against Kafka's own,
and run classic clients (librdkafka, kafka-python, aiokafka) through a gateway in front
of the broker, which advertises an unresolvable host (so every address is rewritten).

Facts from Kafka 3.9.2's source these tests rely on (``kafka_2.13-3.9.2-sources.jar``):

* ``KafkaServer``: ``val brokerFeatures = BrokerFeatures.createEmpty()``: a ZooKeeper-mode
  broker supports no feature, registers ``"features":{}`` and reports no SupportedFeatures.
* ``FinalizedFeatureChangeListener``: a ``/feature`` with a level the broker does not
  support is a ``FeatureCacheUpdateException`` and then ``throw new FatalExitError(1)``
  ("The broker will eventually exit."); at startup the same check fails the start.
* ``KafkaController.enableFeatureVersioning``: the controller rewrites an existing
  ``/feature`` as ``FeatureZNode(IBP, Enabled, features)`` (version 2 from IBP 3.3) when
  it differs, which bumps the epoch.

One broker serves the module; the test that makes a broker exit has its own.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_cluster.v1.response import DescribeClusterResponse
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest as FindCoordinatorV1
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindCoordinatorV4
from kio.schema.metadata.v1.request import MetadataRequest as MetadataV1
from kio.schema.metadata.v12.request import MetadataRequest as MetadataV12
from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest
from kio.static.primitive import i8, i16, i32, i32Timedelta

from gateway.features.catalogue import load_catalogue
from gateway.features.store import FeatureStore, make_client
from gateway.features.validation import FeatureUpdate, UpgradeType, validate_updates
from gateway.features.znode import Finalized, decode_feature_znode
from gateway.interceptors.describe_cluster import strip_software_per_broker
from gateway.server.apache_kafka import ZOOKEEPER_MODE_VERSION
from gateway.wire import strip_unknown_tags
from tests.conftest import GatewayFactory
from tests.harness import (
    UNREACHABLE_HOST,
    GatewayProcess,
    HarnessError,
    KafkaConnection,
    ZooKeeperProcess,
    decode,
)
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.kafka_wire import Features, parse_features
from tests.harness.old_clients import OLD_CLIENTS, OldClient
from tests.integration.test_clients import DRIVERS, ClientDriver, ClientLog, client_log
from tests.integration.test_featurectl import assert_ok, featurectl
from tests.integration.test_features import wait_for

__all__ = ["client_log"]  # a fixture of test_clients, used here by name

UNSUPPORTED_VERSION = 35
CONSUMER_GROUP_HEARTBEAT = 68
DESCRIBE_CLUSTER = 60
UPDATE_FEATURES = 57
#: How long a 3.9 broker may take to act on a /feature change.
FEATURE_CHANGE_S = 15.0
#: The level the write tests finalize: transaction.version 1 gates no API version in the
#: gateway's catalogue, so every gateway supports it, and no 3.9 ZooKeeper-mode broker does.
DOOMED_FEATURE, DOOMED_LEVEL = "transaction.version", 1
DOOMED = f"{DOOMED_FEATURE}={DOOMED_LEVEL}"
#: Metadata v12 for the brokers and controller only (no topics).
BROKERS_ONLY = MetadataV12(
    topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


@dataclass(frozen=True)
class ZooKeeperModeKafka:
    """A 3.9 broker in ZooKeeper mode and the operator's view of its chroot."""

    broker: ApacheKafkaBroker
    zookeeper: str  # connect string of the ensemble, without the broker's chroot
    store: FeatureStore  # the gateway's store on the broker's chroot
    #: ``/feature`` as Kafka wrote it when it started: (data, data version).
    first_feature_znode: tuple[bytes, int]

    @property
    def chroot(self) -> str:
        return self.store.paths.chroot

    def registered_features(self) -> dict[str, tuple[int, int]]:
        """The supported features in the broker's ``/brokers/ids/<id>`` registration."""
        path = f"{self.chroot}/brokers/ids/{self.broker.node_id}"
        data, _ = self.store.client.get(path)
        features = json.loads(data)["features"]
        return {name: (r["min_version"], r["max_version"]) for name, r in features.items()}

    def featurectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return featurectl_on(self.zookeeper, self.chroot, *args)


def featurectl_on(zookeeper: str, chroot: str, *args: str) -> subprocess.CompletedProcess[str]:
    """featurectl (a subprocess, as an operator runs it) on ``chroot``; describe in JSON."""
    output = ("--output", "json") if args[0] == "describe" else ()
    return featurectl(*args, *output, "--zookeeper", zookeeper, "--chroot", chroot)


def start_kafka(workdir: Path, zookeeper: ZooKeeperProcess, name: str) -> ApacheKafkaBroker:
    """Kafka 3.9 in ZooKeeper mode under a chroot of its own, advertising an unresolvable host."""
    broker = ApacheKafkaBroker(
        workdir, version=ZOOKEEPER_MODE_VERSION, zookeeper=zookeeper.connect_string, name=name
    )
    broker.start()
    return broker


@pytest.fixture(scope="module")
def kafka39(
    shared_zookeeper: ZooKeeperProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ZooKeeperModeKafka]:
    """The module's 3.9 broker on the session's ZooKeeper (no test here changes its levels)."""
    broker = start_kafka(tmp_path_factory.mktemp("kafka-zk"), shared_zookeeper, "kafka-3.9")
    client = make_client(shared_zookeeper.connect_string)
    try:
        client.start(timeout=15)
        store = FeatureStore(client, broker.chroot or "")
        data, stat = client.get(store.paths.feature)
        yield ZooKeeperModeKafka(
            broker, shared_zookeeper.connect_string, store, (data, stat.version)
        )
    finally:
        client.stop()
        client.close()
        broker.stop()


def broker_features(broker: ApacheKafkaBroker) -> Features:
    """The broker's own KIP-584 answer: ApiVersions v3 straight to it (no gateway)."""
    with KafkaConnection(broker.host, broker.port) as conn:
        answer = conn.api_versions(version=3)
    assert answer.error_code == 0, answer
    return parse_features(answer)


def wait_for_epoch(broker: ApacheKafkaBroker, epoch: int) -> Features:
    """The broker's features once it reports ``epoch`` (it reacts to a change in < 1 s)."""
    return wait_for(
        lambda: (f := broker_features(broker)).epoch == epoch and f,
        FEATURE_CHANGE_S,
        f"{broker.name} to report epoch {epoch}",
    )


def finalized_levels(features: Features) -> dict[str, int]:
    return {name: high for name, (_, high) in features.finalized.items()}


def described(result: subprocess.CompletedProcess[str]) -> Any:
    """The JSON document of a successful ``featurectl describe --output json``."""
    assert_ok(result)
    return json.loads(result.stdout)


# --------------------------------------------------------------------------------------
# 1. featurectl reads the FeatureZNode Kafka wrote
# --------------------------------------------------------------------------------------


def test_kafka_writes_a_feature_znode_the_gateway_decodes(kafka39: ZooKeeperModeKafka) -> None:
    """At start the 3.9 controller creates ``/feature`` (FeatureZNode v2: no
    min_version_level) with status enabled; ``decode_feature_znode`` reads it."""
    data, version = kafka39.first_feature_znode
    doc = json.loads(data)
    assert doc["version"] == 2 and doc["status"] == 1, doc
    levels = {name: value["max_version_level"] for name, value in doc["features"].items()}
    assert decode_feature_znode(data, version) == Finalized(levels, version)


def test_featurectl_describe_reads_the_brokers_feature_znode(kafka39: ZooKeeperModeKafka) -> None:
    """featurectl on the broker's chroot reports the epoch and levels the broker itself
    reports in ApiVersions v3 (FinalizedFeaturesEpoch, FinalizedFeatures).

    The epoch is the znode's data version: a featurectl that read another path would say
    -1 (never finalized), the broker says 0 or more.
    """
    own = broker_features(kafka39.broker)
    document = described(kafka39.featurectl("describe"))
    assert own.epoch >= 0
    assert document["epoch"] == own.epoch == kafka39.store.read().epoch
    levels = {row["feature"]: row["finalized_version_level"] for row in document["features"]}
    assert {name: level for name, level in levels.items() if level} == finalized_levels(own)
    # Kafka's brokers register under /brokers/ids, not as gateways: featurectl sees none.
    assert document["gateways"] == []


def test_broker_registers_the_features_it_reports(kafka39: ZooKeeperModeKafka) -> None:
    """``/brokers/ids/<id>`` lists the same supported features as ApiVersions: none in 3.9
    ZooKeeper mode (``BrokerFeatures.createEmpty()``), so any finalized level is one the
    broker cannot serve."""
    registered = kafka39.registered_features()
    assert registered == broker_features(kafka39.broker).supported
    assert registered == {}, "a 3.9 ZooKeeper-mode broker now supports features: see the tests"


# --------------------------------------------------------------------------------------
# 2. The layout against Kafka's writer and reader
# --------------------------------------------------------------------------------------


def test_kafka_reads_the_znode_featurectls_writer_writes(kafka39: ZooKeeperModeKafka) -> None:
    """``FeatureStore.write`` (featurectl's writer: FeatureZNode v1 with min_version_level,
    a compare-and-set on the epoch) is read by the broker, which reports the new epoch.

    The levels written are the ones already there: a 3.9 broker serves no feature, and a
    level would stop it (see the next test). featurectl itself has no command that writes
    an unchanged set, so its writer is called directly.
    """
    before = kafka39.store.read()
    assert broker_features(kafka39.broker).epoch == before.epoch
    new_epoch = kafka39.store.write(dict(before.levels), expected_epoch=before.epoch)
    data, stat = kafka39.store.client.get(kafka39.store.paths.feature)
    assert (json.loads(data)["version"], stat.version) == (1, new_epoch)
    after = wait_for_epoch(kafka39.broker, new_epoch)
    assert finalized_levels(after) == dict(before.levels)
    assert described(kafka39.featurectl("describe"))["epoch"] == new_epoch


#: UpdateFeatures items (feature, level, UpgradeType) on which Kafka 3.9's controller and the
#: gateway's ``validate_updates`` must agree: each catalogue feature, and the refusals.
UPDATE_CASES = [
    ("", 1, UpgradeType.UPGRADE),
    *((name, 1, UpgradeType.UPGRADE) for name in sorted(load_catalogue())),
    ("x.version", 0, UpgradeType.UPGRADE),
    ("x.version", 0, UpgradeType.SAFE_DOWNGRADE),
    ("x.version", 1, UpgradeType.SAFE_DOWNGRADE),
    ("x.version", 1, UpgradeType.UNSAFE_DOWNGRADE),
    ("x.version", 1, 7),
]


@pytest.mark.parametrize(("feature", "level", "upgrade_type"), UPDATE_CASES)
def test_gateway_validation_answers_kafkas_error_codes(
    kafka39: ZooKeeperModeKafka, feature: str, level: int, upgrade_type: int
) -> None:
    """The gateway's ZooKeeper-mode rules (``validate_updates``, used by featurectl and
    UpdateFeatures through a gateway), given Kafka's own registration in place of the
    live gateways, refuse what Kafka's controller refuses with the same error code.

    Only codes: Kafka 3.9's messages differ from the gateway's for some items (a level
    below 1 without a downgrade type, deleting or downgrading a feature not finalized).
    """
    registered = kafka39.registered_features()
    request = UpdateFeaturesRequest(
        feature_updates=(
            FeatureUpdateKey(
                feature=feature, max_version_level=i16(level), upgrade_type=i8(upgrade_type)
            ),
        )
    )
    before = kafka39.store.read()
    with KafkaConnection(kafka39.broker.host, kafka39.broker.port) as conn:
        response = conn.request_entity(request)
    [kafka] = response.results
    ours = validate_updates(
        before.levels,
        {f"broker-{kafka39.broker.node_id}": registered},
        [FeatureUpdate(feature, level, upgrade_type)],
    )
    [gateway] = ours.results
    assert (response.error_code, kafka.error_code) == (0, gateway.error_code), (
        kafka.error_message,
        gateway.message,
    )
    assert kafka39.store.read() == before


def test_featurectl_over_the_kafka_protocol_against_the_broker(
    kafka39: ZooKeeperModeKafka,
) -> None:
    """``featurectl --bootstrap-server`` straight at the 3.9 broker (as kafka-features.sh):
    describe shows the broker's epoch; an upgrade, dry run or not, is refused with
    Kafka's own message and exit code 1, and ``/feature`` stays as it was."""
    bootstrap = kafka39.broker.bootstrap
    own = broker_features(kafka39.broker)
    document = described(
        featurectl("--bootstrap-server", bootstrap, "describe", "--output", "json")
    )
    assert document["epoch"] == own.epoch == kafka39.store.read().epoch
    before = kafka39.store.read()
    upgrade = ("--bootstrap-server", bootstrap, "upgrade", "--feature", DOOMED)
    for dry_run in ((), ("--dry-run",)):
        result = featurectl(*upgrade, *dry_run)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "the provided feature is not supported" in result.stderr
    assert kafka39.store.read() == before


def test_featurectl_refuses_a_level_the_brokers_in_the_chroot_cannot_serve(
    kafka39: ZooKeeperModeKafka, gateway_factory: GatewayFactory
) -> None:
    """A gateway sharing the broker's chroot vouches for a level; Kafka's controller
    would refuse it (no live broker supports it), and so should featurectl.

    ``--dry-run``: nothing is written, so the module's broker survives either way.
    """
    gating = ("--zookeeper", kafka39.zookeeper, "--zookeeper-chroot", kafka39.chroot)
    gateway_factory(*gating, upstream=kafka39.broker.bootstrap)
    wait_for(kafka39.store.registrations, what="the gateway's registration")
    before = kafka39.store.read()
    result = kafka39.featurectl("finalize", "--feature", DOOMED, "--dry-run")
    assert kafka39.store.read() == before
    assert result.returncode == 1, result.stdout + result.stderr


def test_a_level_kafka_cannot_serve_stops_the_broker(
    shared_zookeeper: ZooKeeperProcess, tmp_path: Path
) -> None:
    """What a finalized level written by featurectl's writer does to a 3.9 broker.

    1. Kafka reads it (its log names the level and featurectl's new epoch) and, as it
       supports no feature, exits with code 1 (FatalExitError).
    2. Restarted with the level still there, it refuses to start.
    3. With the level removed (featurectl's writer again, v1 layout) it starts; its
       controller rewrites ``/feature`` in its own v2 layout, one epoch later, which the
       broker reports and ``featurectl describe`` reads back.
    """
    broker = start_kafka(tmp_path, shared_zookeeper, "kafka-3.9-doomed")
    client = make_client(shared_zookeeper.connect_string)
    client.start(timeout=15)
    try:
        store = FeatureStore(client, broker.chroot or "")
        start = store.read()
        epoch = store.write(
            {**start.levels, DOOMED_FEATURE: DOOMED_LEVEL}, expected_epoch=start.epoch
        )
        wait_for(lambda: not broker.running, FEATURE_CHANGE_S, "the broker to exit")
        assert broker.returncode == 1
        log = broker.log_text()
        assert f"{{feature={DOOMED_FEATURE}, reason='Unsupported feature'}}" in log
        assert (
            f"finalizedFeatures={{{DOOMED_FEATURE}={DOOMED_LEVEL}}}, finalizedFeaturesEpoch={epoch}"
        ) in log
        assert "The broker will eventually exit." in log

        with pytest.raises(HarnessError, match="exited with code 1 before it was ready"):
            broker.start()
        assert store.read().epoch == epoch  # a failed start writes nothing

        cleared = store.write(dict(start.levels), expected_epoch=epoch)
        broker.start()
        rewritten = cleared + 1
        wait_for(
            lambda: store.read().epoch == rewritten, FEATURE_CHANGE_S, "the controller's rewrite"
        )
        data, _ = client.get(store.paths.feature)
        assert json.loads(data)["version"] == 2, data
        own = wait_for_epoch(broker, rewritten)
        assert finalized_levels(own) == dict(start.levels)
        describe = featurectl_on(shared_zookeeper.connect_string, store.paths.chroot, "describe")
        assert described(describe)["epoch"] == rewritten
    finally:
        client.stop()
        client.close()
        broker.stop()


# --------------------------------------------------------------------------------------
# 3. Classic clients through a gateway in front of the 3.9 broker
# --------------------------------------------------------------------------------------


@pytest.fixture
def gateway_chroot() -> str:
    """The chroot of this test's gateway on the broker's ensemble."""
    return f"/gateways-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def gateway39(
    kafka39: ZooKeeperModeKafka, gateway_factory: GatewayFactory, gateway_chroot: str
) -> GatewayProcess:
    """A gateway in front of the 3.9 broker, gating features on the same ZooKeeper ensemble
    (a chroot of its own, nothing finalized)."""
    gating = ("--zookeeper", kafka39.zookeeper, "--zookeeper-chroot", gateway_chroot)
    return gateway_factory(*gating, upstream=kafka39.broker.bootstrap)


@pytest.mark.parametrize("client", DRIVERS, ids=lambda d: d.name)
def test_classic_clients_produce_consume_in_a_group_and_describe(
    client: ClientDriver,
    gateway39: GatewayProcess,
    kafka39: ZooKeeperModeKafka,
    unique_topic: str,
    client_log: ClientLog,
) -> None:
    """Create a topic (controller), produce acks=all (leader), consume in a classic group
    (coordinator), commit, and describe the cluster: every address is the gateway's."""
    bootstrap = gateway39.bootstrap
    client.create_topic(bootstrap, unique_topic)
    values = [f"{unique_topic}/{client.name}/{i}".encode() for i in range(6)]
    client.produce(bootstrap, unique_topic, values, acks="all")
    got, committed = client.consume_group(bootstrap, unique_topic, f"g-{unique_topic}", 6)
    assert (got, committed) == (values, len(values))
    brokers = client.describe_cluster(bootstrap)
    assert [(b.node_id, b.host, b.port) for b in brokers] == [
        (kafka39.broker.node_id, gateway39.host, gateway39.port)
    ]
    client_log.assert_clean()


def describe_cluster(conn: KafkaConnection) -> DescribeClusterResponse:
    """DescribeCluster v1, decoded without the gateway's KIP-885 tags (kio refuses them)."""
    request = DescribeClusterRequest(include_cluster_authorized_operations=True)
    body = conn.request(DESCRIBE_CLUSTER, 1, request).body
    stripped = strip_software_per_broker(1, strip_unknown_tags(DESCRIBE_CLUSTER, 1, body))
    return decode(DescribeClusterResponse, stripped)


def test_metadata_find_coordinator_and_describe_cluster_name_the_gateway(
    gateway39: GatewayProcess, kafka39: ZooKeeperModeKafka, unique_topic: str
) -> None:
    """Metadata v1 (pre-flexible) and v12, FindCoordinator v1 (one coordinator) and v4
    (batched) through the gateway: the 3.9 broker's answers, with its addresses rewritten.
    DescribeCluster, which the gateway builds itself, says what the broker's own says.
    Premise: straight from the broker, a client is sent to ``unreachable.invalid``."""
    gateway = (gateway39.host, gateway39.port)
    broker, group = kafka39.broker, f"g-{unique_topic}"
    node = broker.node_id
    with KafkaConnection(broker.host, broker.port) as conn:
        direct = conn.request_entity(BROKERS_ONLY)
        kafkas = describe_cluster(conn)
    assert [(b.host, b.port) for b in direct.brokers] == [(UNREACHABLE_HOST, broker.port)]
    with KafkaConnection(*gateway) as conn:
        ours = describe_cluster(conn)
        old = conn.request_entity(MetadataV1(topics=None))
        new = conn.request_entity(BROKERS_ONLY)
        single = wait_for(  # the first FindCoordinator creates __consumer_offsets
            lambda: (r := conn.request_entity(FindCoordinatorV1(key=group))).error_code == 0 and r,
            what="a group coordinator",
        )
        batched = conn.request_entity(FindCoordinatorV4(key_type=i8(0), coordinator_keys=(group,)))
    for answer in (old, new):
        assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(node, *gateway)]
        assert answer.controller_id == node
    assert (single.error_code, single.node_id, single.host, single.port) == (0, node, *gateway)
    [coordinator] = batched.coordinators
    assert (coordinator.error_code, coordinator.node_id) == (0, node)
    assert (coordinator.host, coordinator.port) == gateway
    rewritten = tuple(replace(b, host=gateway[0], port=i32(gateway[1])) for b in kafkas.brokers)
    assert ours == replace(kafkas, brokers=rewritten)


def test_gateway_registers_only_levels_the_broker_serves(
    gateway39: GatewayProcess, kafka39: ZooKeeperModeKafka, gateway_chroot: str
) -> None:
    """The broker refuses ConsumerGroupHeartbeat (the consumer rebalance protocol is
    KRaft-only in 3.9), so a gateway in front of it cannot serve group.version 1."""
    broker = kafka39.broker
    with KafkaConnection(broker.host, broker.port) as conn:
        advertised = conn.api_versions(version=3).api_keys
        request = ConsumerGroupHeartbeatRequest(
            group_id="g-heartbeat", member_id="", member_epoch=i32(0),
            rebalance_timeout=i32Timedelta.parse(timedelta(seconds=30)),
            subscribed_topic_names=("t",),
            topic_partitions=(),
        )  # fmt: skip
        response = conn.request_entity(request)
    assert CONSUMER_GROUP_HEARTBEAT in advertised
    assert response.error_code == UNSUPPORTED_VERSION
    store = FeatureStore(kafka39.store.client, gateway_chroot)
    [registration] = wait_for(store.registrations, what="the gateway's registration")
    assert registration.features["group.version"][1] == 0, registration.features


# -- the gateway in front of 3.9 narrows nothing (issue 41) ----------------------------


def api_versions_of(host: str, port: int) -> dict[int, tuple[int, int]]:
    """An ApiVersions v3 answer's ranges, key by key."""
    with KafkaConnection(host, port) as conn:
        answer = conn.api_versions(3)
    assert answer.error_code == 0
    return dict(answer.api_keys)


def test_api_versions_through_the_gateway_are_the_brokers(
    gateway39: GatewayProcess, kafka39: ZooKeeperModeKafka
) -> None:
    """Key by key, what a client is told through the gateway is what the broker says,
    Kafka 3.9's old minimums included (Produce v0, Fetch v0, ...: versions Kafka 4.0
    removed), except the versions a feature gate withholds and the API the gateway
    serves itself (UpdateFeatures: the levels live in the gateways' ZooKeeper)."""
    direct = api_versions_of(kafka39.broker.host, kafka39.broker.port)
    through = api_versions_of("127.0.0.1", gateway39.port)
    gated = {gate.api_key for spec in load_catalogue().values() for _, gate in spec.gates_up_to(99)}
    differ = {key for key in direct.keys() | through.keys() if direct.get(key) != through.get(key)}
    assert differ <= gated | {UPDATE_FEATURES}, {k: (direct.get(k), through.get(k)) for k in differ}
    for key, low in ((0, 0), (1, 0), (2, 0), (8, 0), (9, 0), (19, 0), (20, 0), (23, 0)):
        assert through[key][0] == direct[key][0] == low, key


@pytest.mark.parametrize("old", OLD_CLIENTS, ids=lambda c: c.name)
def test_old_protocol_clients_work_through_the_gateway_as_direct(
    old: OldClient, gateway39: GatewayProcess, kafka39: ZooKeeperModeKafka, unique_topic: str
) -> None:
    """A client that Kafka 3.9 serves (KIP-896's removed versions: Produce v0-2, Fetch
    v0-3, ListOffsets v0, ...) is served through the gateway in front of it: it produces
    and reads back every record, direct (the control) and through the gateway."""
    direct = f"127.0.0.1:{kafka39.broker.node.internal_port}"  # advertises itself
    DRIVERS[0].create_topic(gateway39.bootstrap, unique_topic)
    sent_direct = [f"{old.name}/direct/{i}".encode() for i in range(200)]
    sent_through = [f"{old.name}/gateway/{i}".encode() for i in range(200)]
    assert old.produce(direct, unique_topic, sent_direct) == 200
    assert old.produce(gateway39.bootstrap, unique_topic, sent_through) == 200
    everything = sent_direct + sent_through
    assert old.consume(direct, unique_topic, 400) == everything
    assert old.consume(gateway39.bootstrap, unique_topic, 400) == everything
    assert '"request.rejected"' not in gateway39.log_text(), "the gateway refused a request"
