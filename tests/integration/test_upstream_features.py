"""The broker's own features, merged into the gateway's answer (Apache Kafka 4.x, KRaft).

Kafka 4.x finalizes features at format time (metadata.version, group.version,
transaction.version, ...). Through a gateway a client must see them as the broker
reports them, except that a feature the gateways gate is finalized at the lower of the
two levels, and versions are withheld to match (gateway.features.report states the
rules). The broker is the session's Apache Kafka, whatever KAFKA_GATEWAY_TEST_BROKER
says: Tansu reports no features, so only Kafka can show the merge.
"""

from __future__ import annotations

import datetime
import struct
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest
from kio.static.primitive import i32, i32Timedelta

from gateway.features.store import FeatureStore
from gateway.interceptors.api_versions import read_broker_software
from gateway.versions import APACHE_KAFKA, fingerprint
from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess, KafkaConnection, ZooKeeperProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.kafka_wire import Features, _compact_string, parse_features
from tests.integration.conftest import CHROOT

CONSUMER_GROUP_HEARTBEAT = 68
UNSUPPORTED_VERSION = 35
UPDATE_FEATURES = 57
API_VERSIONS = 18
INVALID_REQUEST = 42


def features(host: str, port: int) -> tuple[Features, dict[int, tuple[int, int]]]:
    with KafkaConnection(host, port) as conn:
        answer = conn.api_versions(4)
    assert answer.error_code == 0
    return parse_features(answer), answer.api_keys


@pytest.fixture
def kraft(apache_kafka: ApacheKafkaBroker) -> ApacheKafkaBroker:
    """The session's Apache Kafka when it is 4.x: only KRaft finalizes features of its own
    (a ZooKeeper-mode 3.9 lists none; test_kafka_zookeeper_mode covers that merge)."""
    if apache_kafka.zookeeper_mode:
        pytest.skip(f"needs Apache Kafka 4.x (KRaft); the session runs {apache_kafka.version}")
    return apache_kafka


def heartbeat_error(gateway: GatewayProcess) -> int:
    """The error code of a KIP-848 heartbeat (joining a new group) through ``gateway``."""
    request = ConsumerGroupHeartbeatRequest(
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        member_id=uuid.uuid4().hex[:22],
        member_epoch=i32(0),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        subscribed_topic_names=("t",),
        topic_partitions=(),
    )
    with KafkaConnection(gateway.host, gateway.port) as conn:
        return int(conn.request_entity(request).error_code)


def gated_gateway(
    factory: GatewayFactory, kafka: ApacheKafkaBroker, zookeeper: ZooKeeperProcess, tmp_path: Path
) -> GatewayProcess:
    config = tmp_path / "gateway.toml"
    config.write_text('[features]\nupdate_allowed_from = ["127.0.0.0/8"]\n')
    return factory(
        "--config",
        str(config),
        "--zookeeper",
        zookeeper.connect_string,
        "--zookeeper-chroot",
        CHROOT,
        upstream=kafka.bootstrap,
    )


def test_without_gating_a_client_sees_the_brokers_features_as_the_broker_reports_them(
    gateway_factory: GatewayFactory, kraft: ApacheKafkaBroker
) -> None:
    gateway = gateway_factory(upstream=kraft.bootstrap)
    direct, _ = features(kraft.host, kraft.port)
    through, _ = features(gateway.host, gateway.port)
    later, _ = features(kraft.host, kraft.port)
    assert "metadata.version" in direct.finalized, direct
    # As the broker finalized them, never above what the gateway supports (a level the
    # gateway's catalogue lacks is capped to its highest).
    assert through.finalized == {
        name: (min(low, through.supported[name][1]), min(high, through.supported[name][1]))
        for name, (low, high) in direct.finalized.items()
    }
    assert through.finalized["metadata.version"] == direct.finalized["metadata.version"]
    # KRaft's epoch is the metadata log's offset: other tests' topics move it meanwhile.
    assert direct.epoch <= through.epoch <= later.epoch
    # Broker-only features keep the broker's range; the catalogue's are within both.
    assert through.supported["metadata.version"] == direct.supported["metadata.version"]
    assert through.supported["kraft.version"] == direct.supported["kraft.version"]
    for name, (low, high) in through.supported.items():
        theirs = direct.supported[name]
        assert theirs[0] <= low <= high <= theirs[1], name


def test_a_gated_feature_is_finalized_at_the_lower_level_and_its_versions_follow(
    gateway_factory: GatewayFactory,
    kraft: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    direct, direct_keys = features(kraft.host, kraft.port)
    assert direct.finalized.get("group.version") == (1, 1), direct.finalized
    assert CONSUMER_GROUP_HEARTBEAT in direct_keys
    gateway = gated_gateway(gateway_factory, kraft, zookeeper, tmp_path)

    before, keys = features(gateway.host, gateway.port)
    # The broker finalized group.version 1, the gateways nothing: clients get 0, and the
    # KIP-848 heartbeat stays advertised but is refused, as Kafka refuses it with
    # group.version 0 (clients then say "the cluster does not support" at once).
    assert "group.version" not in before.finalized
    assert keys[CONSUMER_GROUP_HEARTBEAT] == direct_keys[CONSUMER_GROUP_HEARTBEAT]
    assert heartbeat_error(gateway) == UNSUPPORTED_VERSION
    assert before.finalized["metadata.version"] == direct.finalized["metadata.version"]

    current = store.read()
    store.write({**current.levels, "group.version": 1}, current.epoch)
    after, keys = wait_for_features(gateway, lambda f: "group.version" in f.finalized)
    assert after.finalized["group.version"] == (1, 1)
    assert keys[CONSUMER_GROUP_HEARTBEAT] == direct_keys[CONSUMER_GROUP_HEARTBEAT]
    assert heartbeat_error(gateway) != UNSUPPORTED_VERSION  # forwarded: Kafka answers it
    assert after.epoch > before.epoch


def test_update_features_of_a_broker_owned_feature_gets_a_clear_refusal(
    gateway_factory: GatewayFactory,
    kraft: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    gateway = gated_gateway(gateway_factory, kraft, zookeeper, tmp_path)
    before, _ = features(kraft.host, kraft.port)
    level = before.finalized["metadata.version"][1]
    request = UpdateFeaturesRequest(
        timeout=datetime.timedelta(seconds=10),
        feature_updates=(
            FeatureUpdateKey(feature="metadata.version", max_version_level=level, upgrade_type=1),
        ),
        validate_only=False,
    )
    with KafkaConnection(gateway.host, gateway.port) as conn:
        response = conn.request(UPDATE_FEATURES, 1, request)
    # v1 body: throttle_time_ms int32, error_code int16, ...
    error_code = struct.unpack_from(">h", response.body, 4)[0]
    assert error_code == INVALID_REQUEST
    assert b"finalized by the Kafka cluster behind kafka-gateway" in response.body
    assert b"kafka-features.sh --bootstrap-server" in response.body
    after, _ = features(kraft.host, kraft.port)
    assert after.finalized == before.finalized
    assert store.read().levels == {}


def wait_for_features(
    gateway: GatewayProcess, ready: Callable[[Features], bool], timeout: float = 15.0
) -> tuple[Features, dict[int, tuple[int, int]]]:
    """The gateway's answer once ``ready`` holds for it (or the last one after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        found = features(gateway.host, gateway.port)
        if ready(found[0]) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def _no_leftover_levels(store: FeatureStore) -> None:
    assert store.read().levels == {}, "each test starts from a ZooKeeper of its own"


def test_a_real_kafka_4_4_is_fingerprinted_as_exactly_its_release(
    gateway_factory: GatewayFactory, apache_kafka: ApacheKafkaBroker
) -> None:
    """The release table's 4.4 row (from franz-go's kversion) is what a 4.4 broker
    advertises, so the gateway's KIP-885 tags name the release, not a range."""
    _, direct_keys = features(apache_kafka.host, apache_kafka.port)
    release = ".".join(apache_kafka.version.split(".")[:2])
    assert fingerprint(direct_keys) == (APACHE_KAFKA, release)
    gateway = gateway_factory(upstream=apache_kafka.bootstrap)
    body = _compact_string("kafka-gateway-tests") + _compact_string("1") + b"\x00"
    with KafkaConnection(gateway.host, gateway.port) as conn:
        answer = conn.request(API_VERSIONS, 3, body)
    assert read_broker_software(answer.body) == (APACHE_KAFKA, release)
