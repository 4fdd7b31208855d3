"""Apache Kafka's Java client (kafka-clients 4.4) through the gateway in front of Apache
Kafka 4.x, and KIP-848 (and KIP-932, KIP-890) gating with real Java and librdkafka clients.

The session's ``apache_kafka`` advertises ``unreachable.invalid``: every scenario works
only if the gateway rewrote each address the client followed (bootstrap, leaders, group
and transaction coordinators). The Java side is the probe in ``tests/clients/java``, one
JVM per scenario reporting JSON lines (``tests/harness/java_clients.py``).

A plain sidecar (no ZooKeeper) passes the broker's features through, so clients see what
Kafka finalized (transaction.version=2 included); a gated one (``--zookeeper``) serves
its own finalized levels, which the tests raise with ``featurectl`` as an operator would:
the client refused before must fail cleanly, a new one must then get the feature.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from prometheus_client.parser import text_string_to_metric_families

from gateway.features.store import FeatureStore
from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess, KafkaConnection, ZooKeeperProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.java_clients import JavaProbe, JavaToolMissing, ProbeRun, build
from tests.harness.kafka_wire import Features, parse_features
from tests.integration.conftest import CHROOT
from tests.integration.test_clients import ConfluentDriver
from tests.integration.test_features import wait_for

PARTITIONS = 3
RECORDS = 12
TXN_RECORDS = 4
CONSUMER_GROUP_HEARTBEAT = 68
SHARE_GROUP_HEARTBEAT = 76
END_TXN = 26
#: How long a refused consumer gets to say so (Java throws within ~1.5 s on this box).
REFUSAL_TIMEOUT_MS = 8000
#: What librdkafka logs (debug=cgrp) when the broker has no ConsumerGroupHeartbeat; it
#: reports nothing to the application (no error_cb, no poll error: it keeps retrying).
LIBRDKAFKA_REFUSAL = "ConsumerGroupHeartbeatRequest not supported by broker"
UNSUPPORTED_VERSION = "org.apache.kafka.common.errors.UnsupportedVersionException"


@pytest.fixture(scope="module")
def probe() -> JavaProbe:
    """The Java probe, built once (cached across sessions by its sources' hash)."""
    try:
        return build()
    except JavaToolMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(autouse=True)
def _kafka_4(apache_kafka: ApacheKafkaBroker) -> None:
    if apache_kafka.zookeeper_mode:  # no KIP-848, KIP-890 part 2 nor share groups
        pytest.skip(f"needs Apache Kafka 4.x (KRaft); the session runs {apache_kafka.version}")


@pytest.fixture
def sidecar(gateway_factory: GatewayFactory, apache_kafka: ApacheKafkaBroker) -> GatewayProcess:
    """A plain sidecar gateway (no feature gating) in front of Apache Kafka."""
    return gateway_factory(upstream=apache_kafka.bootstrap, metrics=True)


def start_gated(
    factory: GatewayFactory,
    kafka: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    *extra: str,
    name: str = "gw-gated",
) -> GatewayProcess:
    """A gateway gating features with the built-in catalogue, its levels in ``zookeeper``."""
    return factory(
        "--zookeeper", zookeeper.connect_string, "--zookeeper-chroot", CHROOT,
        "--gateway-id", name, *extra,
        upstream=kafka.bootstrap, metrics=True, name=name,
    )  # fmt: skip


@pytest.fixture
def gated(
    gateway_factory: GatewayFactory, apache_kafka: ApacheKafkaBroker, zookeeper: ZooKeeperProcess
) -> GatewayProcess:
    """A gated gateway with nothing finalized in its ZooKeeper yet."""
    return start_gated(gateway_factory, apache_kafka, zookeeper)


def gateway_requests(gw: GatewayProcess) -> dict[str, set[int]]:
    """The API versions clients sent through ``gw``, by API name (from /metrics)."""
    text = urllib.request.urlopen(gw.metrics_url, timeout=5).read().decode()
    seen: dict[str, set[int]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kafka_gateway_requests_total" and sample.value > 0:
                api, version = sample.labels["api"], int(sample.labels["api_version"])
                seen.setdefault(api, set()).add(version)
    return seen


def api_versions(host: str, port: int) -> tuple[Features, dict[int, tuple[int, int]]]:
    """Features and API ranges from one ApiVersions v4 exchange (what clients parse)."""
    with KafkaConnection(host, port) as conn:
        answer = conn.api_versions(4)
    assert answer.error_code == 0
    return parse_features(answer), answer.api_keys


def finalize(zookeeper: ZooKeeperProcess, feature: str) -> None:
    """``featurectl finalize --feature NAME=LEVEL``, as an operator runs it."""
    argv = [sys.executable, "-m", "featurectl", "finalize", "--zookeeper"]
    argv += [zookeeper.connect_string, "--chroot", CHROOT, "--feature", feature]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"featurectl exited {done.returncode}\n{done.stdout}{done.stderr}"


def wait_finalized(gw: GatewayProcess, feature: str) -> None:
    """Until ``gw`` reports ``feature`` ("name=level") finalized (its ZooKeeper watch fired)."""
    name, level = feature.split("=")

    def finalized() -> bool:
        levels = api_versions(gw.host, gw.port)[0].finalized
        return levels.get(name, (0, 0))[1] >= int(level)

    wait_for(finalized, what=f"{gw.name} serving {feature}")


def wait_advertised(gw: GatewayProcess, api_key: int, version: int = 0) -> None:
    """Until ``gw`` offers ``api_key`` up to at least ``version`` (its ZooKeeper watch fired)."""

    def offered() -> bool:
        ranges = api_versions(gw.host, gw.port)[1]
        return api_key in ranges and ranges[api_key][1] >= version

    wait_for(offered, what=f"{gw.name} offering API key {api_key} v{version}")


def assert_healthy(gw: GatewayProcess) -> None:
    """The gateway still runs and never logged a traceback."""
    assert gw.running, gw.log_tail()
    assert "Traceback" not in gw.log_text(), gw.log_tail()


def produce(probe: JavaProbe, gw: GatewayProcess, topic: str, prefix: str) -> ProbeRun:
    """RECORDS records ``k<i>`` = ``<prefix>-<i>`` into a new topic of PARTITIONS partitions."""
    run = probe.run(
        "produce", gw.bootstrap, topic=topic, count=RECORDS, prefix=prefix, partitions=PARTITIONS
    )
    assert not run.errors, run.describe()
    return run


def expected(prefix: str, count: int = RECORDS) -> list[str]:
    return sorted(f"{prefix}-{i}" for i in range(count))


def transactions(probe: JavaProbe, gw: GatewayProcess, topic: str) -> ProbeRun:
    """One committed and one aborted transaction into ``topic``, each with records and
    group offsets; checks that read_committed sees only the committed records,
    read_uncommitted both (the aborted ones were written, then filtered), and that only
    the committed transaction's offsets count."""
    run = probe.run(
        "transactions", gw.bootstrap, topic=topic, count=TXN_RECORDS, transactional_id=topic
    )
    assert not run.errors, run.describe()
    assert [t["outcome"] for t in run.of("transaction")] == ["committed", "aborted"]
    committed, aborted = expected("committed", TXN_RECORDS), expected("aborted", TXN_RECORDS)
    assert sorted(run.values("read_committed")) == committed
    assert sorted(run.values("read_uncommitted")) == sorted(committed + aborted)
    assert all(r["reached_end"] for r in run.of("read")), run.describe()
    # Offsets sent to each transaction: the committed one's count, the aborted one's not.
    assert run.one("txn_offsets")["offsets"] == {f"{topic}-0": TXN_RECORDS}, run.describe()
    return run


# --------------------------------------------------------------------------------------
# A plain sidecar: Kafka's own behaviour, only addresses rewritten
# --------------------------------------------------------------------------------------


def test_admin_client_sees_the_gateway_as_the_cluster(
    probe: JavaProbe, sidecar: GatewayProcess, apache_kafka: ApacheKafkaBroker, unique_topic: str
) -> None:
    run = probe.run("admin", sidecar.bootstrap, topic=unique_topic, partitions=PARTITIONS)
    assert not run.errors, run.describe()
    # The broker as the client must see it: its id at the gateway's address.
    node = {"id": apache_kafka.node_id, "host": sidecar.host, "port": sidecar.port}
    cluster = run.one("cluster")
    assert cluster["nodes"] == [node]
    assert cluster["controller"] == node
    assert run.one("topic_created")["partitions"] == PARTITIONS
    assert run.one("topics")["has_topic"]
    assert run.one("topic")["leaders"] == {str(p): node for p in range(PARTITIONS)}
    # Without gating the client sees the broker's finalized features as the broker
    # itself states them on its own port, never above what the gateway supports (a
    # level a gateway's catalogue lacks is capped to its highest).
    broker, _ = api_versions(apache_kafka.host, apache_kafka.port)
    features = run.one("features")
    supported = {k: tuple(v) for k, v in features["supported"].items()}
    assert {k: tuple(v) for k, v in features["finalized"].items()} == {
        name: (min(low, supported[name][1]), min(high, supported[name][1]))
        for name, (low, high) in broker.finalized.items()
    }
    assert tuple(features["supported"]["metadata.version"]) == broker.supported["metadata.version"]


def test_the_sidecar_offers_every_api_version_the_broker_offers(
    sidecar: GatewayProcess, apache_kafka: ApacheKafkaBroker
) -> None:
    """Without gating, the ApiVersions answer through the gateway is the broker's, key by
    key: Kafka 4.4's ApiVersions v5 (KIP-1242), its newest versions and keys (93, 94)
    included, except UpdateFeatures, which a gateway answers itself."""
    broker = api_versions(apache_kafka.host, apache_kafka.port)[1]
    through = api_versions(sidecar.host, sidecar.port)[1]
    update_features = 57
    differ = {k for k in broker.keys() | through.keys() if broker.get(k) != through.get(k)}
    assert differ <= {update_features}, {k: (broker.get(k), through.get(k)) for k in differ}


def test_a_java_4_4_client_asks_api_versions_once_per_connection(
    probe: JavaProbe, sidecar: GatewayProcess, unique_topic: str
) -> None:
    """kafka-clients 4.4 asks ApiVersions v5 first: answered at v5, never refused and
    asked again at a lower version (a second round trip on every connection)."""
    produce(probe, sidecar, unique_topic, "once")
    seen = gateway_requests(sidecar)
    assert seen["ApiVersions"] == {5}, seen
    text = urllib.request.urlopen(sidecar.metrics_url, timeout=5).read().decode()
    refused = [
        sample
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "kafka_gateway_rejected_requests_total"
        and sample.labels.get("api") == "ApiVersions"
        and sample.value > 0
    ]
    assert refused == [], refused


def test_idempotent_producer_writes_each_record_once_and_a_reader_gets_them_back(
    probe: JavaProbe, sidecar: GatewayProcess, unique_topic: str
) -> None:
    produced = produce(probe, sidecar, unique_topic, "idem")
    delivered = produced.of("delivered")
    assert len(delivered) == RECORDS == produced.one("produced")["count"]
    # acks=all + idempotence: every partition's offsets are 0..n-1, nothing written twice.
    offsets: dict[int, list[int]] = {}
    for record in delivered:
        offsets.setdefault(record["partition"], []).append(record["offset"])
    assert sorted(offsets) == list(range(PARTITIONS)), offsets
    assert all(sorted(o) == list(range(len(o))) for o in offsets.values()), offsets

    read = probe.run("consume", sidecar.bootstrap, topic=unique_topic)
    assert not read.errors, read.describe()
    assert read.one("read")["reached_end"]
    assert sorted(read.values("read_uncommitted")) == expected("idem")
    # Each record is where the producer was told it landed, under its key.
    placed = {(r["key"], r["partition"], r["offset"]) for r in delivered}
    assert {(r["key"], r["partition"], r["offset"]) for r in read.of("record")} == placed
    assert {r["key"]: r["value"] for r in read.of("record")} == {
        f"k{i}": f"idem-{i}" for i in range(RECORDS)
    }
    assert "InitProducerId" in gateway_requests(sidecar), "the producer was not idempotent"


@pytest.mark.parametrize(
    ("protocol", "group_apis", "other_apis"),
    [
        ("classic", {"JoinGroup", "SyncGroup"}, {"ConsumerGroupHeartbeat"}),
        ("consumer", {"ConsumerGroupHeartbeat"}, {"JoinGroup", "SyncGroup"}),
    ],
)
def test_consumer_group_reads_everything_produced(
    probe: JavaProbe,
    sidecar: GatewayProcess,
    unique_topic: str,
    protocol: str,
    group_apis: set[str],
    other_apis: set[str],
) -> None:
    produce(probe, sidecar, unique_topic, protocol)
    run = probe.run(
        "consume",
        sidecar.bootstrap,
        topic=unique_topic,
        expect=RECORDS,
        group=f"g-{unique_topic}",
        protocol=protocol,
    )
    assert not run.errors, run.describe()
    assert sorted(run.values("group")) == expected(protocol)
    membership = run.one("membership")
    assert membership["member_id"] and membership["generation"] >= 1, membership
    assert sorted(membership["assignment"]) == [f"{unique_topic}-{p}" for p in range(PARTITIONS)]
    committed = run.one("committed")["offsets"]
    assert sum(committed.values()) == RECORDS, committed
    # The group really ran the protocol asked for (KIP-848's heartbeat, or join/sync).
    seen = gateway_requests(sidecar)
    assert group_apis <= seen.keys(), seen
    assert not other_apis & seen.keys(), seen


def test_transactions_read_committed_sees_only_the_committed_one(
    probe: JavaProbe, sidecar: GatewayProcess, unique_topic: str
) -> None:
    transactions(probe, sidecar, unique_topic)
    # Kafka 4.4 finalizes transaction.version=2 and the sidecar passes it on, so the
    # client runs KIP-890 part 2: Produce v12+, EndTxn v5+, no AddPartitionsToTxn and
    # no AddOffsetsToTxn (the broker adds partitions and the group implicitly).
    seen = gateway_requests(sidecar)
    assert max(seen["EndTxn"]) >= 5 and max(seen["Produce"]) >= 12, seen
    assert not {"AddPartitionsToTxn", "AddOffsetsToTxn"} & seen.keys(), seen


# --------------------------------------------------------------------------------------
# A gated gateway: features as finalized in the gateways' ZooKeeper
# --------------------------------------------------------------------------------------


def test_gated_admin_update_features_is_refused_unless_allowed(
    probe: JavaProbe,
    gateway_factory: GatewayFactory,
    apache_kafka: ApacheKafkaBroker,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    refusing = start_gated(gateway_factory, apache_kafka, zookeeper)
    run = probe.run("admin", refusing.bootstrap, update_feature="group.version=1")
    error = run.one("error")
    assert error["step"] == "update_features", run.describe()
    assert error["cause_class"] == "org.apache.kafka.common.errors.ClusterAuthorizationException"
    assert "refused" in error["cause_message"] and "update_allowed" in error["cause_message"]
    assert "group.version" not in store.read().levels
    # The broker's own features still show: metadata.version at the broker's level.
    broker, _ = api_versions(apache_kafka.host, apache_kafka.port)
    finalized = run.one("features")["finalized"]
    assert tuple(finalized.get("metadata.version", ())) == broker.finalized["metadata.version"]

    config = tmp_path / "allowed.toml"
    config.write_text('[features]\nupdate_allowed_from = ["127.0.0.0/8"]\n')
    allowed = start_gated(
        gateway_factory, apache_kafka, zookeeper, "--config", str(config), name="gw-allowed"
    )
    run = probe.run("admin", allowed.bootstrap, update_feature="group.version=1")
    assert not run.errors, run.describe()
    updated = run.one("features_updated")
    assert (updated["feature"], updated["level"]) == ("group.version", 1)
    assert store.read().levels.get("group.version") == 1
    for gw in (refusing, allowed):
        assert_healthy(gw)


@pytest.mark.parametrize(
    ("scenario", "options", "feature", "api_key", "refusal", "apis"),
    [
        pytest.param(
            "consume", {"protocol": "consumer"}, "group.version=1", CONSUMER_GROUP_HEARTBEAT,
            "does not support the new CONSUMER group protocol", {"ConsumerGroupHeartbeat"},
            id="kip848-consumer-group",
        ),
        pytest.param(
            "share", {}, "share.version=1", SHARE_GROUP_HEARTBEAT,
            "does not support the share group protocol", {"ShareGroupHeartbeat", "ShareFetch"},
            id="kip932-share-group",
        ),
    ],
)  # fmt: skip
def test_java_group_member_is_refused_until_its_feature_is_finalized(
    probe: JavaProbe,
    gated: GatewayProcess,
    zookeeper: ZooKeeperProcess,
    unique_topic: str,
    scenario: str,
    options: dict[str, str],
    feature: str,
    api_key: int,
    refusal: str,
    apis: set[str],
) -> None:
    """The gateway refuses the group's heartbeat API until the operator finalizes the
    feature (advertised, answered UNSUPPORTED_VERSION, as Kafka does): the Java client
    fails cleanly with UnsupportedVersionException, the gateway stays healthy, and after
    ``featurectl finalize`` a new member consumes everything."""
    produce(probe, gated, unique_topic, "gated")
    assert api_key in api_versions(gated.host, gated.port)[1]

    def member(group: str, **extra: str | int) -> ProbeRun:
        return probe.run(
            scenario, gated.bootstrap, topic=unique_topic, expect=RECORDS, group=group,
            **options, **extra,
        )  # fmt: skip

    refused = member(f"refused-{unique_topic}", timeout_ms=REFUSAL_TIMEOUT_MS)
    error = refused.one("error")
    assert error["class"] == UNSUPPORTED_VERSION, refused.describe()
    assert refusal in error["message"]
    assert not refused.of("record")
    assert_healthy(gated)

    finalize(zookeeper, feature)
    wait_finalized(gated, feature)
    served = member(f"g-{unique_topic}")
    assert not served.errors, served.describe()
    assert sorted(r["value"] for r in served.of("record")) == expected("gated")
    assert apis <= gateway_requests(gated).keys()
    assert_healthy(gated)


class _Lines(logging.Handler):
    """librdkafka's log lines for one client (confluent-kafka's ``logger``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"tests.librdkafka.kip848.{uuid.uuid4().hex[:8]}")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def librdkafka_group(
    gw: GatewayProcess, topic: str, timeout: float
) -> tuple[list[str], list[str], list[str]]:
    """What a new KIP-848 librdkafka consumer gets: its values, errors (poll's and
    error_cb's) and debug log, once RECORDS arrived, an error came, it logged that the
    broker lacks the protocol, or ``timeout`` passed."""
    lines = _Lines()
    errors: list[str] = []
    values: list[str] = []
    consumer = Consumer(
        {
            "bootstrap.servers": gw.bootstrap,
            "group.id": f"rk-{uuid.uuid4().hex[:8]}",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "debug": "cgrp",
            "error_cb": lambda err: errors.append(str(err)),
        },
        logger=lines.logger,
    )
    deadline = time.monotonic() + timeout
    try:
        consumer.subscribe([topic])
        while len(values) < RECORDS and not errors and time.monotonic() < deadline:
            if any(LIBRDKAFKA_REFUSAL in line for line in lines.lines):
                break
            msg = consumer.poll(0.2)
            if msg is not None and msg.error():
                errors.append(str(msg.error()))
            elif msg is not None:
                values.append(msg.value().decode())
    finally:
        consumer.close()
    return values, errors, lines.lines


def test_kip848_librdkafka_consumer_is_refused_until_group_version_is_finalized(
    gated: GatewayProcess, zookeeper: ZooKeeperProcess, unique_topic: str
) -> None:
    driver = ConfluentDriver()
    driver.create_topic(gated.bootstrap, unique_topic)
    values = [f"rk-{i}" for i in range(RECORDS)]
    driver.produce(gated.bootstrap, unique_topic, [v.encode() for v in values], acks="all")

    got, errors, log = librdkafka_group(gated, unique_topic, REFUSAL_TIMEOUT_MS / 1000)
    assert got == []
    # Told: a fatal error, as Kafka gives (test_kip848_librdkafka_consumer_is_told_...).
    assert any("ConsumerGroupHeartbeat" in error for error in errors), (errors, log[-20:])
    assert_healthy(gated)

    finalize(zookeeper, "group.version=1")
    wait_finalized(gated, "group.version=1")
    got, errors, _ = librdkafka_group(gated, unique_topic, 20.0)
    assert not errors and sorted(got) == sorted(values), errors
    assert "ConsumerGroupHeartbeat" in gateway_requests(gated)
    assert_healthy(gated)


def test_kip848_librdkafka_consumer_is_told_it_is_refused(
    gated: GatewayProcess, unique_topic: str
) -> None:
    """As Kafka 4.4 with group.version disabled does, the gateway advertises
    ConsumerGroupHeartbeat and answers it UNSUPPORTED_VERSION, which librdkafka reports
    to the application at once as a fatal error (when the API was withheld instead,
    librdkafka only logged at debug level and waited)."""
    ConfluentDriver().create_topic(gated.bootstrap, unique_topic)
    _, errors, log = librdkafka_group(gated, unique_topic, REFUSAL_TIMEOUT_MS / 1000)
    assert any("ConsumerGroupHeartbeat" in error for error in errors), log[-5:]


def test_transaction_version_2_is_used_once_finalized(
    probe: JavaProbe, gated: GatewayProcess, zookeeper: ZooKeeperProcess, unique_topic: str
) -> None:
    """The broker finalized transaction.version=2, the gateways have not: the client runs
    KIP-890 part 1 transactions (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn v4) until
    the operator finalizes level 2; a new producer then uses EndTxn v5, Produce v12+ and
    TxnOffsetCommit v5+ (the catalogue's level 2)."""
    transactions(probe, gated, f"{unique_topic}-tv1")
    before = gateway_requests(gated)
    assert max(before["EndTxn"]) <= 4 and max(before["Produce"]) <= 11, before
    assert max(before["TxnOffsetCommit"]) <= 4, before
    assert {"AddPartitionsToTxn", "AddOffsetsToTxn"} <= before.keys(), before

    finalize(zookeeper, "transaction.version=2")
    wait_advertised(gated, END_TXN, 5)
    transactions(probe, gated, f"{unique_topic}-tv2")
    after = gateway_requests(gated)
    assert max(after["EndTxn"]) >= 5 and max(after["Produce"]) >= 12, after
    assert max(after["TxnOffsetCommit"]) >= 5, after
    assert_healthy(gated)
