"""franz-go (Go: kgo and kadm) through a sidecar gateway in front of real Apache Kafka.

The broker (fixture ``apache_kafka``: Kafka 4.4 in KRaft mode by default, 3.9 in
ZooKeeper mode with KAFKA_GATEWAY_TEST_BROKER=kafka-3.9, where the KIP-848 parts use
classic groups) advertises an unresolvable host, so every call below that goes past
bootstrap works only because the gateway rewrote the address (``test_premise_*``
checks that premise without a gateway).

franz-go sends, per request, the highest version both it and the broker advertise, so
besides the scenarios (produce/consume, classic and KIP-848 groups, admin,
transactions) every test checks the versions franz-go really sent against the
gateway's ApiVersions answer (``assert_negotiated``): a gateway that advertised a
version it cannot carry, or hid one it can, shows up here as a different version on
the wire. The Go program and its output format: tests/clients/go, tests/harness/go_clients.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GatewayFactory
from tests.harness import UNREACHABLE_HOST, GatewayProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.go_clients import (
    GoClient,
    GoMissing,
    GoRun,
    assert_negotiated,
    build,
    claim_covers,
    finalized_out_of_range,
)

#: Records per scenario: enough to land on every partition, few enough to stay fast.
RECORDS = 20
PARTITIONS = 3
#: Records above the gateway's 64 KiB streaming threshold, a few per Fetch response.
LARGE_RECORDS = 24
LARGE_RECORD_BYTES = 100 * 1024
#: A client bounded by this fails a broken gateway in seconds, not minutes.
OP_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def binary() -> Iterator[Path]:
    """The built ``gatewayclient`` (skips without ``go``)."""
    try:
        yield build()
    except GoMissing as missing:
        pytest.skip(str(missing))


@pytest.fixture(scope="module")
def direct_versions(binary: Path, apache_kafka: ApacheKafkaBroker) -> dict[str, Any]:
    """Kafka's own ApiVersions answer as franz-go reads it (the "versions" event).

    Bootstrap-only, so it works although the broker advertises an unresolvable host.
    """
    return GoClient(binary, apache_kafka.bootstrap).run("versions").one("api_versions")


def kip848_group_protocol(direct_versions: dict[str, Any]) -> str:
    """The group protocol to test KIP-848 with: "consumer" where the broker offers it.

    Decided from the broker's answer, not the gateway's: a gateway that hid
    ConsumerGroupHeartbeat from a broker offering it must fail the tests, not skip them.
    """
    low_high = direct_versions["keys"].get("ConsumerGroupHeartbeat", [0, 0])
    enabled = direct_versions["finalized_features"].get("group.version", 0) >= 1
    return "consumer" if enabled and low_high[1] >= 1 else "classic"


@pytest.fixture
def gateway(gateway_factory: GatewayFactory, apache_kafka: ApacheKafkaBroker) -> GatewayProcess:
    """A sidecar gateway in front of Apache Kafka, advertising 127.0.0.1."""
    return gateway_factory(upstream=apache_kafka.bootstrap)


@pytest.fixture
def franz(binary: Path, gateway: GatewayProcess) -> GoClient:
    """franz-go pointed at the gateway."""
    return GoClient(binary, gateway.bootstrap)


@pytest.fixture
def advertised(franz: GoClient) -> dict[str, list[int]]:
    """The gateway's ApiVersions answer as franz-go reads it: name -> [min, max]."""
    return franz.run("versions").one("api_versions")["keys"]


def produce(franz: GoClient, topic: str, count: int = RECORDS, **flags: object) -> GoRun:
    """Create ``topic`` (PARTITIONS partitions) and produce ``count`` records to it."""
    return franz.run(
        "produce", topic=topic, count=count, create=PARTITIONS, timeout_s=OP_TIMEOUT_S, **flags
    )


# --------------------------------------------------------------------------------------
# Premise: without the gateway, franz-go cannot get past bootstrap
# --------------------------------------------------------------------------------------


def test_premise_direct_produce_fails(
    binary: Path, apache_kafka: ApacheKafkaBroker, unique_topic: str
) -> None:
    """Directly, the broker's advertised address does not resolve: producing fails."""
    direct = GoClient(binary, apache_kafka.bootstrap)
    run = direct.run("produce", topic=unique_topic, count=1, create=1, timeout_s=3, check=False)
    assert run.returncode == 1, run
    assert run.of("produced") == []
    assert UNREACHABLE_HOST in run.one("error")["error"]


# --------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------


def assert_read_back(produced: GoRun, consumed: GoRun) -> None:
    """``consumed`` holds exactly the records ``produced`` wrote, at the same offsets."""
    fields = ("partition", "offset", "key", "value", "bytes")
    sent = sorted(tuple(e[f] for f in fields) for e in produced.of("produced"))
    got = sorted(tuple(e[f] for f in fields) for e in consumed.of("consumed"))
    assert got == sent
    for partition in {p for p, *_ in got}:
        offsets = [o for p, o, *_ in got if p == partition]
        assert offsets == list(range(len(offsets))), f"partition {partition}: {offsets}"


def test_produce_then_consume(
    franz: GoClient, advertised: dict[str, list[int]], unique_topic: str
) -> None:
    """acks=all idempotent produce, then a group-less consume of every partition.

    Then the same with records of 100 KiB: their Fetch responses are far above the
    64 KiB from which the gateway streams a response instead of holding it.
    """
    produced = produce(franz, unique_topic)
    consumed = franz.run("consume", topic=unique_topic, count=RECORDS, timeout_s=OP_TIMEOUT_S)
    assert_read_back(produced, consumed)
    assert len(set(consumed.values)) == RECORDS
    assert "InitProducerID" in produced.requests, "franz-go's idempotent producer is the default"
    assert_negotiated(produced, advertised)
    assert_negotiated(consumed, advertised)

    large = f"{unique_topic}-large"
    produced = produce(franz, large, count=LARGE_RECORDS, pad=LARGE_RECORD_BYTES)
    consumed = franz.run("consume", topic=large, count=LARGE_RECORDS, timeout_s=OP_TIMEOUT_S)
    assert_read_back(produced, consumed)
    assert min(e["bytes"] for e in consumed.of("consumed")) > LARGE_RECORD_BYTES


def test_acks_zero_then_acks_one(
    franz: GoClient, advertised: dict[str, list[int]], unique_topic: str
) -> None:
    """Produce requests with acks=0 (no answer comes), one after another, then acks=1.

    Every record arrives, and the acks=1 producer after them gets its answers: the
    gateway neither waited for answers to acks=0 nor handed out one that is not there.
    """
    zero = produce(franz, unique_topic, count=10, acks="none", prefix="zero")
    one = franz.run("produce", topic=unique_topic, count=3, acks="leader", prefix="one")
    consumed = franz.run("consume", topic=unique_topic, count=13, timeout_s=OP_TIMEOUT_S)
    assert sorted(consumed.values) == sorted(zero.values_produced + one.values_produced)
    # acks=1 answers carry the offsets (acks=0 has none): they must be the records' own.
    where = {e["value"]: (e["partition"], e["offset"]) for e in consumed.of("consumed")}
    assert {e["value"]: (e["partition"], e["offset"]) for e in one.of("produced")} == {
        v: where[v] for v in one.values_produced
    }
    assert_negotiated(zero, advertised)
    assert_negotiated(one, advertised)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_commits_and_resumes(
    franz: GoClient,
    advertised: dict[str, list[int]],
    gateway: GatewayProcess,
    unique_topic: str,
    protocol: str,
    direct_versions: dict[str, Any],
) -> None:
    """A group member commits what it read; the next member resumes right after it.

    "classic" is JoinGroup/SyncGroup with client-side balancing; "consumer" is KIP-848
    (franz-go's ServerSideBalancer: ConsumerGroupHeartbeat). franz-go falls back to
    classic without a word when ConsumerGroupHeartbeat v1 is not advertised, so the
    requests on the wire say which protocol really ran.
    """
    if protocol == "consumer" and kip848_group_protocol(direct_versions) != "consumer":
        pytest.skip("this broker does not offer KIP-848 consumer groups (group.version)")
    produce(franz, unique_topic)
    group = f"g-{unique_topic}"
    first = franz.run(
        "group", topic=unique_topic, group=group, protocol=protocol, count=8, timeout_s=OP_TIMEOUT_S
    )
    second = franz.run(
        "group",
        topic=unique_topic,
        group=group,
        protocol=protocol,
        count=RECORDS - 8,
        timeout_s=OP_TIMEOUT_S,
    )

    both = Counter(first.values + second.values)
    assert sorted(both) == sorted(f"v-{i}" for i in range(RECORDS))
    assert max(both.values()) == 1, f"read twice: {[v for v, n in both.items() if n > 1]}"

    for run in (first, second):
        assert_negotiated(run, advertised)
        if protocol == "consumer":
            assert "ConsumerGroupHeartbeat" in run.requests
            assert "JoinGroup" not in run.requests
        else:
            assert {"JoinGroup", "SyncGroup"} <= set(run.requests)
            assert "ConsumerGroupHeartbeat" not in run.requests

    admin = franz.run("admin", group=group, topic=unique_topic, delete_group=True)
    committed = admin.one("group_offsets")
    assert committed["error"] == ""
    assert committed["offsets"][unique_topic] == admin.one("offsets")["end"]
    listed = admin.one("list_groups")
    assert (listed["error"], listed["listed"], listed["state"]) == ("", True, "Empty")
    assert listed["type"] == protocol  # ListGroups v5 (KIP-848) names the group type
    if protocol == "consumer":
        described = admin.one("describe_consumer_groups")
        assert (described["error"], described["state"]) == ("", "Empty")
    else:
        described = admin.one("describe_groups")
        assert (described["error"], described["state"]) == ("", "Empty")
        assert described["protocol_type"] == "consumer"
        assert described["coordinator"][0]["port"] == gateway.port
    assert admin.one("delete_group") == {
        "event": "delete_group",
        "group": group,
        "error": "",
        "message": "",
    }
    assert_negotiated(admin, advertised)
    assert franz.run("admin", group=group).one("list_groups")["listed"] is False


def test_admin(
    franz: GoClient,
    advertised: dict[str, list[int]],
    gateway: GatewayProcess,
    apache_kafka: ApacheKafkaBroker,
    unique_topic: str,
) -> None:
    """kadm through the gateway: every broker address it sees is the gateway's."""
    created = franz.run("admin", topic=unique_topic, create=PARTITIONS)
    assert created.one("created")["partitions"] == PARTITIONS
    assert unique_topic in created.one("topics")["names"]

    me = [{"node_id": apache_kafka.node_id, "host": gateway.host, "port": gateway.port}]
    metadata = created.one("metadata")
    assert metadata["brokers"] == me
    cluster = created.one("describe_cluster")
    assert (cluster["error"], cluster["brokers"]) == ("", me)
    assert cluster["cluster"] == metadata["cluster"]
    assert cluster["controller"] == metadata["controller"]

    # kadm asks each broker of the Metadata answer, so this connects to the rewritten address.
    (versions,) = created.of("api_versions")
    assert versions["error"] == ""
    assert versions["keys"] == advertised

    zeros = {str(p): 0 for p in range(PARTITIONS)}
    assert created.one("offsets") == {
        "event": "offsets",
        "topic": unique_topic,
        "start": zeros,
        "end": zeros,
    }
    produced = produce(franz, unique_topic, count=5)
    ends = Counter(str(e["partition"]) for e in produced.of("produced"))
    after = franz.run("admin", topic=unique_topic)
    assert after.one("offsets")["end"] == {p: ends.get(p, 0) for p in zeros}
    assert_negotiated(created, advertised)
    assert_negotiated(after, advertised)


def test_transactions(
    franz: GoClient,
    advertised: dict[str, list[int]],
    unique_topic: str,
    direct_versions: dict[str, Any],
) -> None:
    """One aborted then one committed transaction; read_committed sees only the second.

    Then exactly-once consume-transform-produce (franz-go's GroupTransactSession, in a
    KIP-848 group where the broker offers them) moves the topic's committed records to a
    second topic, committing the group's offsets inside each transaction
    (TxnOffsetCommit through the gateway).
    """
    count = 5
    txn = franz.run(
        "txn",
        topic=unique_topic,
        txn_id=f"txn-{unique_topic}",
        count=count,
        create=PARTITIONS,
        timeout_s=OP_TIMEOUT_S,
    )
    assert [e["ended"] for e in txn.of("transaction")] == ["aborted", "committed"]
    assert_negotiated(txn, advertised)
    assert {"InitProducerID", "EndTxn"} <= set(txn.requests)

    committed = franz.run(
        "consume",
        topic=unique_topic,
        count=count,
        isolation="read_committed",
        timeout_s=OP_TIMEOUT_S,
    )
    expected = [f"committed-{i}" for i in range(count)]
    assert sorted(committed.values) == expected
    everything = franz.run("consume", topic=unique_topic, count=2 * count, timeout_s=OP_TIMEOUT_S)
    assert sorted(everything.values) == sorted([f"aborted-{i}" for i in range(count)] + expected)

    # The transaction coordinator and the partition leaders, as kadm finds them.
    admin = franz.run("admin", topic=unique_topic, txn_id=f"txn-{unique_topic}")
    described = admin.one("describe_transactions")
    assert (described["error"], described["state"]) == ("", "CompleteCommit")
    listed = admin.one("list_transactions")
    assert (listed["error"], listed["listed"]) == ("", True)
    assert listed["producer_id"] == described["producer_id"]
    written = {str(e["partition"]) for e in txn.of("produced")}
    producers = admin.one("describe_producers")["producers"]
    assert {p for p, ids in producers.items() if described["producer_id"] in ids} == written
    assert_negotiated(admin, advertised)

    copy, group = f"{unique_topic}-eos", f"eos-{unique_topic}"
    protocol = kip848_group_protocol(direct_versions)
    eos = franz.run(
        "eos",
        source=unique_topic,
        topic=copy,
        create=PARTITIONS,
        group=group,
        protocol=protocol,
        txn_id=f"eos-{unique_topic}",
        count=count,
        timeout_s=OP_TIMEOUT_S,
    )
    assert all(e["committed"] for e in eos.of("transaction")), eos
    group_request = "ConsumerGroupHeartbeat" if protocol == "consumer" else "JoinGroup"
    assert {group_request, "TxnOffsetCommit"} <= set(eos.requests)
    assert_negotiated(eos, advertised)
    moved = franz.run(
        "consume", topic=copy, count=count, isolation="read_committed", timeout_s=OP_TIMEOUT_S
    )
    assert sorted(moved.values) == [f"eos-{v}" for v in expected]
    # The group resumes after the last record it moved (the commit marker after it is
    # a control record, so this is below the partition's end offset).
    resume: dict[str, int] = {}
    for record in committed.of("consumed"):
        resume[str(record["partition"])] = max(
            resume.get(str(record["partition"]), 0), record["offset"] + 1
        )
    offsets = franz.run("admin", group=group).one("group_offsets")
    assert offsets["offsets"] == {unique_topic: resume}


# --------------------------------------------------------------------------------------
# ApiVersions: the gateway's answer against the broker's own
# --------------------------------------------------------------------------------------


@pytest.fixture
def both_versions(franz: GoClient, direct_versions: dict[str, Any]) -> tuple[dict, dict]:
    """ApiVersions as franz-go reads it (kversion): (directly from Kafka, via the gateway)."""
    return direct_versions, franz.run("versions").one("api_versions")


def test_api_versions_are_the_brokers(
    both_versions: tuple[dict, dict],
    apache_kafka: ApacheKafkaBroker,
    request: pytest.FixtureRequest,
) -> None:
    """Without gating the gateway advertises the broker's keys and ranges, key by key
    (UpdateFeatures aside, which a gateway answers itself), so franz-go's kversion guesses
    the same release through it; and the broker's finalized levels, capped by the
    gateway's supported range (gateway.features.report). Both guesses go into the test
    report (``user_properties``) for the record.
    """
    direct, gateway = both_versions
    request.node.user_properties += [
        ("kversion_guess_direct", direct["guess"]),
        ("kversion_guess_gateway", gateway["guess"]),
    ]
    release = ".".join(apache_kafka.version.split(".")[:2])
    assert direct["guess"] == f"v{release}", "premise: kversion recognises this Kafka"
    assert gateway["guess"] == direct["guess"]

    keys = direct["keys"].keys() | gateway["keys"].keys()
    differ = {name for name in keys if direct["keys"].get(name) != gateway["keys"].get(name)}
    assert differ <= {"UpdateFeatures"}, {
        n: (direct["keys"].get(n), gateway["keys"].get(n)) for n in differ
    }
    supported = gateway["supported_features"]
    expected = {
        name: min(level, supported.get(name, (0, level))[1])
        for name, level in direct["finalized_features"].items()
    }
    assert gateway["finalized_features"] == {n: v for n, v in expected.items() if v >= 1}
    for name, (low, high) in gateway["supported_features"].items():
        broker_low, broker_high = direct["supported_features"][name]
        assert broker_low <= low <= high <= broker_high, f"{name}: {[low, high]} vs broker"


#: The gateway's KIP-885 tags on ApiVersions (gateway/interceptors/api_versions.py).
BROKER_SOFTWARE_NAME_TAG, BROKER_SOFTWARE_VERSION_TAG = "10000", "10001"


def test_broker_software_tags(
    both_versions: tuple[dict, dict],
    apache_kafka: ApacheKafkaBroker,
    request: pytest.FixtureRequest,
) -> None:
    """franz-go reads the gateway's ApiVersions with its two extra tags (KIP-885, as
    tags unknown to it) and they name Apache Kafka at a release range holding the real one.
    """
    direct, gateway = both_versions
    assert direct["unknown_tags"] == {}, "premise: Kafka itself sends no such tags"
    tags = gateway["unknown_tags"]
    request.node.user_properties.append(("gateway_broker_software", tags))
    assert tags[BROKER_SOFTWARE_NAME_TAG] == "Apache Kafka"
    release = ".".join(apache_kafka.version.split(".")[:2])
    claim = tags[BROKER_SOFTWARE_VERSION_TAG]
    assert claim_covers(claim, release), f"gateway says {claim}, the broker is {release}"


def test_finalized_levels_within_supported_ranges(both_versions: tuple[dict, dict]) -> None:
    """No finalized level lies outside the advertised supported range.

    Kafka never answers so (a broker cannot run a level it does not support); the
    direct answer is checked the same way, as the premise. Through the gateway this held
    for share.version only once the merge capped finalized levels (Kafka 4.4 finalizes
    share.version 2, which the gateways' catalogue listed as 1 until it listed level 2).
    """
    direct, gateway = both_versions
    assert finalized_out_of_range(direct) == {}, "premise: Kafka's own answer is consistent"
    assert finalized_out_of_range(gateway) == {}
