"""The version bridge with IBM/sarama (Go) pinned to old Kafka releases, against Kafka 4.4
(the session's ``apache_kafka``): sarama picks every request's version from its
``Config.Version`` alone, so at 0.8.2 it produces with Produce v0 (magic 0 message sets)
and fetches with Fetch v0, and at 0.10.2 its consumer group fetches with Fetch v3
(magic 1) and commits with OffsetCommit v2. Through the gateway every record arrives
once, byte-identical, with each codec; direct to the broker the same client fails (the
control). The Go program: tests/clients/go-sarama, built by tests/harness/go_clients.py.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.go_clients import SARAMA, GoClient, GoMissing, GoRun, build
from tests.harness.old_clients import OldClient
from tests.integration.test_bridge import bridging, direct_address, metrics_text
from tests.integration.test_client_identities import samples
from tests.integration.test_clients import DRIVERS

RECORDS = 200
#: Each sarama run bounds itself by this; a broken bridge fails a test in seconds.
RUN_TIMEOUT_S = 30.0
CODECS = ["none", "gzip", "snappy", "lz4"]
OLD_PRODUCER = "0.8.2.0"
GROUP_VERSION = "0.10.2.0"  # sarama's consumer groups need 0.10.2 or later

#: sarama 1.61 sends ApiVersions v3 on every connection (KIP-511) and still picks each
#: request's version from Config.Version; with ApiVersionsRequest off it sends none, as a
#: client older than KIP-511 does. The gateway tells a v3 asker the broker's own ranges,
#: which sarama then ignores: the bridge must carry both the same.
API_VERSIONS = [False, True]
API_VERSIONS_IDS = ["no-ApiVersions", "ApiVersions-v3"]

Read = tuple[int, bytes | None, bytes]  # (offset, key, value)
Placed = tuple[int, int, bytes | None, bytes]  # (partition, offset, key, value)


@pytest.fixture(scope="module")
def sarama() -> Iterator[Path]:
    """The built ``gatewaysarama`` (skips without ``go``)."""
    try:
        yield build(SARAMA)
    except GoMissing as missing:
        pytest.skip(str(missing))


@pytest.fixture
def bridged(gateway_factory: GatewayFactory, apache_kafka: ApacheKafkaBroker) -> GatewayProcess:
    return bridging(gateway_factory, apache_kafka)


def _producer_version(codec: str) -> str:
    # sarama's config check refuses LZ4 below 0.10, so an old sarama sends LZ4 as 0.10.0
    # does: Produce v2, magic 1.
    return "0.10.0.0" if codec == "lz4" else OLD_PRODUCER


def _placed(run: GoRun, event: str) -> list[Placed]:
    def raw(text: str | None) -> bytes | None:
        return None if text is None else base64.b64decode(text)

    out = []
    for e in run.of(event):
        value = raw(e["value"])
        assert value is not None
        out.append((e["partition"], e["offset"], raw(e["key"]), value))
    return out


def _reads(run: GoRun, event: str) -> list[Read]:
    """The records of a one-partition topic, in order."""
    placed = _placed(run, event)
    assert {p for p, _, _, _ in placed} <= {0}, placed
    return [(o, k, v) for _, o, k, v in placed]


def _produce_run(
    binary: Path, bootstrap: str, topic: str, codec: str, api_versions: bool, spread: bool = False
) -> list[Placed]:
    """``RECORDS`` records, to partition 0 or (``spread``) by key hash; each acknowledged
    once, at the next offset of its partition."""
    run = GoClient(binary, bootstrap).run(
        "produce",
        timeout_s=RUN_TIMEOUT_S,
        topic=topic,
        count=RECORDS,
        version=_producer_version(codec),
        compression=codec,
        prefix=f"sarama-{codec}",
        api_versions=api_versions,
        hash=spread,
    )
    produced = _placed(run, "produced")
    assert len(produced) == RECORDS
    for partition in {p for p, _, _, _ in produced}:
        offsets = sorted(o for p, o, _, _ in produced if p == partition)
        assert offsets == list(range(len(offsets))), partition
    assert 0 < sum(k is None for _, _, k, _ in produced) < RECORDS  # null keys among them
    return produced


def _produce(
    binary: Path, bootstrap: str, topic: str, codec: str, api_versions: bool
) -> list[Read]:
    """``RECORDS`` records to partition 0: offsets 0 to ``RECORDS`` - 1."""
    produced = _produce_run(binary, bootstrap, topic, codec, api_versions)
    assert [p for p, _, _, _ in produced] == [0] * RECORDS
    return [(o, k, v) for _, o, k, v in produced]


@pytest.mark.parametrize("api_versions", API_VERSIONS, ids=API_VERSIONS_IDS)
@pytest.mark.parametrize("codec", CODECS)
def test_old_sarama_produces_and_reads_back_across_kafka_4(
    bridged: GatewayProcess, sarama: Path, unique_topic: str, codec: str, api_versions: bool
) -> None:
    DRIVERS[0].create_topic(bridged.bootstrap, unique_topic)
    produced = _produce(sarama, bridged.bootstrap, unique_topic, codec, api_versions)
    client = GoClient(sarama, bridged.bootstrap)
    # Fetch v3 (magic 1) and Fetch v0 (magic 0): 200 of 200, byte-identical, and nothing
    # past them in the second after (a duplicate).
    fetched = {}
    for version in (GROUP_VERSION, OLD_PRODUCER):
        run = client.run(
            "consume",
            check=False,
            timeout_s=RUN_TIMEOUT_S if version == GROUP_VERSION else 10.0,
            topic=unique_topic,
            count=RECORDS,
            version=version,
            api_versions=api_versions,
        )
        fetched[version] = run
    assert _reads(fetched[GROUP_VERSION], "consumed") == produced, fetched[GROUP_VERSION]
    magic0 = fetched[OLD_PRODUCER]
    if codec == "lz4":
        # Magic 0's LZ4 is Kafka's own framing, whose header checksum is wrong (KAFKA-3160);
        # the bridge writes it as Kafka does, and sarama refuses it here as it refuses
        # Kafka 3.9's own answer to the same fetch.
        assert magic0.returncode != 0 and not magic0.of("consumed"), magic0
        assert "lz4: invalid header checksum" in magic0.one("error")["error"], magic0
    else:
        assert _reads(magic0, "consumed") == produced, magic0
    # The broker stored record batches that a modern client reads as they were sent.
    modern = OldClient("kafka-python-modern", "kafka-python")
    got = modern.consume_records(bridged.bootstrap, unique_topic, RECORDS, linger_s=1.0)
    assert got == produced
    produce_from = 2 if codec == "lz4" else 0
    sent = _sarama_sent(bridged, api_versions)
    old = {
        ("Produce", produce_from),
        ("Metadata", 0),
        ("Fetch", 0),
        ("Fetch", 3),
        ("ListOffsets", 0),
    }
    assert old <= sent, sent
    text = metrics_text(bridged)
    for api, version in (("Produce", produce_from), ("Fetch", "3"), ("Fetch", "0")):
        assert f'api="{api}",from_version="{version}"' in text, (api, version)
    log = bridged.log_text()
    assert '"request.rejected"' not in log and "rewrite_failed" not in log


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_old_sarama_reads_with_a_small_fetch_size(
    bridged: GatewayProcess, sarama: Path, unique_topic: str, codec: str
) -> None:
    """A fetch size (300 bytes) below one compressed wrapper and a few plain messages: the
    bridge's cut (whole messages, at least one) neither loses a record nor stalls sarama,
    which reads every record once."""
    DRIVERS[0].create_topic(bridged.bootstrap, unique_topic)
    produced = _produce(sarama, bridged.bootstrap, unique_topic, codec, api_versions=False)
    client = GoClient(sarama, bridged.bootstrap)
    for version in (OLD_PRODUCER, GROUP_VERSION):
        run = client.run(
            "consume",
            timeout_s=RUN_TIMEOUT_S,
            topic=unique_topic,
            count=RECORDS,
            version=version,
            fetch_bytes=300,
        )
        assert _reads(run, "consumed") == produced, version


def test_a_modern_producers_zstd_and_headers_reach_old_sarama(
    bridged: GatewayProcess, sarama: Path, unique_topic: str
) -> None:
    """librdkafka's zstd batches with headers: sarama 0.8.2 and 0.10.2 read the records
    uncompressed (magic 0/1 have no zstd) and without their headers, which are counted."""
    from confluent_kafka import Producer

    DRIVERS[0].create_topic(bridged.bootstrap, unique_topic)
    producer = Producer(
        {"bootstrap.servers": bridged.bootstrap, "compression.type": "zstd", "linger.ms": 50}
    )
    sent = [
        (None if i % 7 == 3 else b"k%d" % i, b"zstd-%d-" % i * (1 + i % 13)) for i in range(RECORDS)
    ]
    for key, value in sent:
        producer.produce(unique_topic, key=key, value=value, partition=0, headers=[("h", b"x")])
    assert producer.flush(RUN_TIMEOUT_S) == 0
    client = GoClient(sarama, bridged.bootstrap)
    for version in (OLD_PRODUCER, GROUP_VERSION):
        run = client.run(
            "consume", timeout_s=RUN_TIMEOUT_S, topic=unique_topic, count=RECORDS, version=version
        )
        got = _reads(run, "consumed")
        assert [(k, v) for _, k, v in got] == sent, version
        assert [o for o, _, _ in got] == list(range(RECORDS)), version
    dropped = samples(bridged, "kafka_gateway_bridge_headers_dropped")
    assert dropped and dropped[0].value >= 2 * RECORDS, dropped


def _sarama_sent(gw: GatewayProcess, api_versions: bool) -> set[tuple[str, int]]:
    """(API, version) of each request sarama sent the gateway: under its KIP-511 name, or
    its client id when it sent no ApiVersions (and then none was sent)."""
    name = "sarama" if api_versions else "client-id:gatewaysarama"
    sent = {
        (s.labels["api"], int(s.labels["api_version"]))
        for s in samples(gw, "kafka_gateway_requests")
        if s.labels["client_software_name"] == name
    }
    assert (("ApiVersions", 3) in sent) == api_versions, sent
    return sent


def _group(
    binary: Path, bootstrap: str, topic: str, group: str, count: int, api_versions: bool
) -> GoRun:
    """A member of ``group`` that reads ``count`` records, commits them and leaves."""
    run = GoClient(binary, bootstrap).run(
        "group",
        timeout_s=RUN_TIMEOUT_S,
        topic=topic,
        group=group,
        count=count,
        version=GROUP_VERSION,
        api_versions=api_versions,
    )
    assert run.one("committed")["records"] == count
    return run


@pytest.mark.parametrize("api_versions", API_VERSIONS, ids=API_VERSIONS_IDS)
@pytest.mark.parametrize("codec", CODECS)
def test_a_sarama_group_commits_and_resumes_across_kafka_4(
    bridged: GatewayProcess, sarama: Path, unique_topic: str, codec: str, api_versions: bool
) -> None:
    DRIVERS[0].create_topic(bridged.bootstrap, unique_topic)
    produced = _produce(sarama, bridged.bootstrap, unique_topic, codec, api_versions)
    group = f"g-{unique_topic}"
    half = RECORDS // 2
    first = _group(sarama, bridged.bootstrap, unique_topic, group, half, api_versions)
    assert _reads(first, "consumed") == produced[:half]
    # A restart: a new member starts at the committed offset, and reads the rest once.
    second = _group(sarama, bridged.bootstrap, unique_topic, group, RECORDS - half, api_versions)
    assert _reads(second, "consumed") == produced[half:]
    sent = _sarama_sent(bridged, api_versions)
    assert {("JoinGroup", 1), ("SyncGroup", 0), ("OffsetCommit", 2), ("Fetch", 3)} <= sent, sent
    assert 'api="Fetch",from_version="3"' in metrics_text(bridged)
    assert '"request.rejected"' not in bridged.log_text()


def test_a_sarama_group_resumes_every_partition_across_kafka_4(
    bridged: GatewayProcess, sarama: Path, unique_topic: str
) -> None:
    """Three partitions, records spread by key: each bridged Fetch v3 asks for several
    partitions, each from its own offset, and the restart resumes each where its commit
    left it; the two members' records together are the produced ones, each once."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bridged.bootstrap})
    admin.create_topics([NewTopic(unique_topic, 3, 1)])[unique_topic].result(RUN_TIMEOUT_S)
    produced = _produce_run(sarama, bridged.bootstrap, unique_topic, "snappy", False, spread=True)
    assert {p for p, _, _, _ in produced} == {0, 1, 2}
    group = f"g-{unique_topic}"
    half = RECORDS // 2
    first = _placed(_group(sarama, bridged.bootstrap, unique_topic, group, half, False), "consumed")
    rest = RECORDS - half
    second = _placed(
        _group(sarama, bridged.bootstrap, unique_topic, group, rest, False), "consumed"
    )
    assert sorted(first + second) == sorted(produced)  # all of them, none twice
    for partition in range(3):
        # Per partition, in order: the second member began where the first one's commit was.
        offsets = [o for p, o, _, _ in first + second if p == partition]
        assert offsets == sorted(offsets), partition


def test_sarama_0_8_2_offsets_commit_and_resume_across_kafka_4(
    bridged: GatewayProcess, sarama: Path, unique_topic: str
) -> None:
    """sarama 0.8.2's OffsetManager beside a partition consumer, no group membership: it
    commits with OffsetCommit v1 (bridged to v2) and a restart resumes where it left."""
    DRIVERS[0].create_topic(bridged.bootstrap, unique_topic)
    produced = _produce(sarama, bridged.bootstrap, unique_topic, "gzip", api_versions=False)
    client = GoClient(sarama, bridged.bootstrap)
    half = RECORDS // 2
    runs = []
    for count in (half, RECORDS - half):
        runs.append(
            client.run(
                "offsets",
                timeout_s=RUN_TIMEOUT_S,
                topic=unique_topic,
                group=f"g-{unique_topic}",
                count=count,
                version=OLD_PRODUCER,
                api_versions=False,
            )
        )
    resumed = [r.one("resumed") for r in runs]
    assert not resumed[0]["committed"]  # from the oldest: nothing committed yet
    assert resumed[1]["committed"] and resumed[1]["offset"] == half
    assert [r.one("committed")["offset"] for r in runs] == [half, RECORDS]
    assert _reads(runs[0], "consumed") + _reads(runs[1], "consumed") == produced
    sent = _sarama_sent(bridged, api_versions=False)
    assert {("OffsetCommit", 1), ("OffsetFetch", 1), ("Fetch", 0)} <= sent, sent
    assert 'api="OffsetCommit",from_version="1",to_version="2"' in metrics_text(bridged)


def test_direct_to_kafka_4_old_sarama_fails(
    apache_kafka: ApacheKafkaBroker, sarama: Path, unique_topic: str
) -> None:
    """The control: the same clients, direct, get nothing acknowledged and read nothing."""
    direct = direct_address(apache_kafka)
    DRIVERS[0].create_topic(direct, unique_topic)
    client = GoClient(sarama, direct)
    produce = client.run(
        "produce",
        check=False,
        timeout_s=15.0,
        topic=unique_topic,
        count=10,
        version=OLD_PRODUCER,
        compression="none",
    )
    assert produce.returncode != 0 and not produce.of("produced"), produce
    DRIVERS[0].produce(direct, unique_topic, [b"a", b"b", b"c"], "all")
    group = client.run(
        "group",
        check=False,
        timeout_s=15.0,
        topic=unique_topic,
        group=f"g-{unique_topic}",
        count=3,
        version=GROUP_VERSION,
    )
    # Kafka 4 still serves its group APIs (JoinGroup v1, SyncGroup v0): it joins, and
    # then the broker closes the connection on its Fetch v3.
    assert group.of("assigned") and group.returncode != 0 and not group.of("consumed"), group
