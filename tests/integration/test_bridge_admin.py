"""The admin v0s Kafka 4.0 removed, across the version bridge (Kafka 4.4, the session's
``apache_kafka``): kafka-python's KafkaAdminClient pinned to Kafka 1.0 or 0.11 sends
DescribeConfigs, DescribeAcls, CreateAcls, DeleteAcls (and, for 1.0, DescribeLogDirs) at
v0. Direct to the broker they fail (the control); through the gateway they are answered
as Kafka answered v0, checked against what a modern client reads of the same broker.
Kafka 1.0's own Java AdminClient (tests/clients/java/old-admin) does the same calls.

The session broker has no authorizer: there the ACL requests get Kafka's clean answer
for that, SECURITY_DISABLED (54), and the tests check it crosses the bridge intact. A
second broker, with Kafka's StandardAuthorizer, holds a LITERAL and a PREFIXED ACL: the
v0s create, see and delete the LITERAL one only, as v0 meant (the v0 answers' own
LITERAL-only rule is unit-tested, tests/unit/gateway/bridge/test_admin.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ConfigResource,
    KafkaAdminClient,
    NewTopic,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import SecurityDisabledError

from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.java_clients import OLD_ADMIN, JavaProbe, JavaToolMissing, build
from tests.harness.procs import HarnessError
from tests.integration.test_bridge import bridging, metrics_text

OLD_ADMINS = [(1, 0), (0, 11)]
RETENTION_MS = "123456"


@pytest.fixture
def bridged(gateway_factory: GatewayFactory, apache_kafka: ApacheKafkaBroker) -> GatewayProcess:
    return bridging(gateway_factory, apache_kafka)


def _admin(bootstrap: str, api_version: tuple[int, int] | None = None) -> Any:

    settings: dict[str, Any] = {"request_timeout_ms": 15000}
    if api_version is not None:
        settings["api_version"] = api_version
    return KafkaAdminClient(bootstrap_servers=bootstrap, **settings)


def _topic_with_a_config(bootstrap: str, topic: str) -> None:

    modern = _admin(bootstrap)
    try:
        modern.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": RETENTION_MS})])
    finally:
        modern.close()


def _bridged(gw: GatewayProcess, api: str) -> float:
    """How many requests of ``api`` the gateway bridged from v0 to v1."""
    prefix = f'kafka_gateway_bridged_requests_total{{api="{api}",from_version="0",to_version="1"}}'
    for line in metrics_text(gw).splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("api_version", OLD_ADMINS, ids=["1.0", "0.11"])
def test_describe_configs_v0_reads_what_kafka_4_says_with_v0s_is_default(
    bridged: GatewayProcess, unique_topic: str, api_version: tuple[int, int]
) -> None:

    _topic_with_a_config(bridged.bootstrap, unique_topic)
    resource = [ConfigResource("TOPIC", unique_topic)]
    modern = _admin(bridged.bootstrap)
    try:
        every = modern.describe_configs(resource, config_filter="all")["topic"][unique_topic]
    finally:
        modern.close()
    # What Kafka 4.4 itself says is not its default (ConfigSource, v4): retention.ms at least.
    not_default = {n for n, c in every.items() if c["config_source"] != "DEFAULT_CONFIG"}
    assert "retention.ms" in not_default and len(not_default) < len(every)
    old = _admin(bridged.bootstrap, api_version)
    try:
        # kafka-python's "modified" filter keeps the configs whose v0 IsDefault is false.
        modified = old.describe_configs(resource)["topic"][unique_topic]
        everything = old.describe_configs(resource, config_filter="all")["topic"][unique_topic]
    finally:
        old.close()
    assert set(modified) == not_default
    assert modified["retention.ms"]["value"] == RETENTION_MS
    assert {n: c["value"] for n, c in everything.items()} == {
        n: c["value"] for n, c in every.items()
    }
    assert _bridged(bridged, "DescribeConfigs") >= 2
    assert '"request.rejected"' not in bridged.log_text()


@pytest.mark.parametrize("api_version", OLD_ADMINS, ids=["1.0", "0.11"])
def test_the_acl_v0s_get_kafkas_answer_across_the_bridge(
    bridged: GatewayProcess, unique_topic: str, api_version: tuple[int, int]
) -> None:

    old = _admin(bridged.bootstrap, api_version)
    topic = ResourcePatternFilter(ResourceType.TOPIC, unique_topic, ACLResourcePatternType.LITERAL)
    acl_filter = ACLFilter(
        principal="User:alice",
        host="*",
        operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=topic,
    )
    acl = ACL(
        "User:alice",
        "*",
        ACLOperation.READ,
        ACLPermissionType.ALLOW,
        ResourcePattern(ResourceType.TOPIC, unique_topic),
    )
    try:
        with pytest.raises(SecurityDisabledError):
            old.describe_acls(acl_filter)
        assert old.create_acls([acl]) == {"succeeded": [], "failed": [SecurityDisabledError]}
        ((_, matched, error),) = old.delete_acls([acl_filter])
        assert matched == [] and error is SecurityDisabledError
    finally:
        old.close()
    for api in ("DescribeAcls", "CreateAcls", "DeleteAcls"):
        assert _bridged(bridged, api) == 1, api


def test_describe_log_dirs_v0_names_the_topics_partition(
    bridged: GatewayProcess, unique_topic: str
) -> None:
    _topic_with_a_config(bridged.bootstrap, unique_topic)
    old = _admin(bridged.bootstrap, (1, 0))
    try:
        (broker,) = old.describe_log_dirs()
    finally:
        old.close()
    (log_dir,) = broker["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"]
    partitions = {
        (t["name"], p["partition_index"]) for t in log_dir["topics"] for p in t["partitions"]
    }
    assert (unique_topic, 0) in partitions
    assert _bridged(bridged, "DescribeLogDirs") == 1


def test_direct_to_kafka_4_the_old_admin_client_fails(
    apache_kafka: ApacheKafkaBroker, unique_topic: str
) -> None:
    """The control: the same client and requests, direct, are refused."""

    if apache_kafka.zookeeper_mode:
        pytest.skip("Kafka 3.9 still serves the v0s")
    direct = f"127.0.0.1:{apache_kafka.node.internal_port}"
    _topic_with_a_config(direct, unique_topic)
    old = _admin(direct, (1, 0))
    try:
        with pytest.raises(Exception):  # noqa: B017 - any failure: the broker refused it
            old.describe_configs([ConfigResource("TOPIC", unique_topic)])
        with pytest.raises(Exception):  # noqa: B017
            old.describe_log_dirs()
    finally:
        old.close()


@pytest.fixture(scope="module")
def old_java_admin() -> JavaProbe:
    """Kafka 1.0's AdminClient (tests/clients/java/old-admin), built once."""
    try:
        return build(OLD_ADMIN)
    except JavaToolMissing as exc:
        pytest.skip(str(exc))


def _broker_id(bootstrap: str) -> int:
    modern = _admin(bootstrap)
    try:
        (broker,) = modern.describe_log_dirs()  # one broker: the session's
        return int(broker["broker"])
    finally:
        modern.close()


def test_kafka_1_0s_java_admin_client_is_carried_across_kafka_4(
    bridged: GatewayProcess,
    apache_kafka: ApacheKafkaBroker,
    unique_topic: str,
    old_java_admin: JavaProbe,
) -> None:

    _topic_with_a_config(bridged.bootstrap, unique_topic)
    broker = _broker_id(bridged.bootstrap)
    run = old_java_admin.run("admin", bridged.bootstrap, topic=unique_topic, broker=broker)
    modern = _admin(bridged.bootstrap)
    try:
        every = modern.describe_configs(
            [ConfigResource("TOPIC", unique_topic)], config_filter="all"
        )
    finally:
        modern.close()
    every = every["topic"][unique_topic]
    configs = {e["name"]: e for e in run.of("config")}
    # The same configs and values as Kafka 4.4 tells a modern client, and isDefault()
    # exactly where 4.4's ConfigSource says DEFAULT_CONFIG.
    assert {n: c["value"] for n, c in configs.items()} == {n: c["value"] for n, c in every.items()}
    assert {n for n, c in configs.items() if not c["is_default"]} == {
        n for n, c in every.items() if c["config_source"] != "DEFAULT_CONFIG"
    }, run.describe()
    assert configs["retention.ms"]["value"] == RETENTION_MS
    # No authorizer on the session broker: Kafka's SECURITY_DISABLED, as the 1.0 client
    # names it, for each ACL call.
    assert {(e["call"], e["error"]) for e in run.of("acl_error")} == {
        ("createAcls", "SecurityDisabledException"),
        ("describeAcls", "SecurityDisabledException"),
        ("deleteAcls", "SecurityDisabledException"),
    }, run.describe()
    (log_dir,) = run.of("log_dir")
    assert log_dir["error"] == "NONE" and f"{unique_topic}-0" in log_dir["partitions"].split(",")
    for api in ("DescribeConfigs", "CreateAcls", "DescribeAcls", "DeleteAcls", "DescribeLogDirs"):
        assert _bridged(bridged, api) >= 1, api
    assert '"request.rejected"' not in bridged.log_text()


def test_direct_to_kafka_4_kafka_1_0s_java_admin_client_fails(
    apache_kafka: ApacheKafkaBroker, unique_topic: str, old_java_admin: JavaProbe
) -> None:
    if apache_kafka.zookeeper_mode:
        pytest.skip("Kafka 3.9 still serves the v0s")
    direct = f"127.0.0.1:{apache_kafka.node.internal_port}"
    _topic_with_a_config(direct, unique_topic)
    with pytest.raises(HarnessError, match="UnsupportedVersionException"):
        old_java_admin.run("admin", direct, topic=unique_topic, broker=_broker_id(direct))


# The delegation-token v0s, by hand (no old client here speaks them): each one's v1 is
# its v0 again, so the bridged v0 answer must be, byte for byte, what Kafka 4.4 answers
# the same request at v1 direct. The session broker has no SASL, so Kafka refuses them
# with its clean answer, DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (64: a token needs an
# authenticated SASL or mTLS connection). A granted token's v0s, over a SASL login:
# test_bridge_policy.py.
TOKEN_REQUESTS = {
    38: {"Renewers": [{"PrincipalType": "User", "PrincipalName": "bob"}], "MaxLifetimeMs": -1},
    39: {"Hmac": b"\x01\x02", "RenewPeriodMs": 1000},
    40: {"Hmac": b"\x01\x02", "ExpiryTimePeriodMs": 1000},
    41: {"Owners": None},
}


@pytest.mark.parametrize("key", sorted(TOKEN_REQUESTS), ids=lambda k: f"key{k}")
def test_the_delegation_token_v0s_get_kafkas_v1_answer(
    bridged: GatewayProcess, apache_kafka: ApacheKafkaBroker, key: int
) -> None:
    from gateway.bridge import messages
    from gateway.protocol import api_name
    from tests.harness import KafkaConnection

    name = api_name(key)
    direct = ("127.0.0.1", apache_kafka.node.internal_port)
    with KafkaConnection(*direct, timeout=15) as conn:
        v1 = conn.request(key, 1, messages.encode(f"{name}Request", 1, TOKEN_REQUESTS[key]))
    expected = messages.decode(f"{name}Response", 1, v1.body)
    assert expected["ErrorCode"] != 0, expected  # Kafka's refusal, not a token
    with KafkaConnection(bridged.host, bridged.port, timeout=15) as conn:
        v0 = conn.request(key, 0, messages.encode(f"{name}Request", 0, TOKEN_REQUESTS[key]))
    got = messages.decode(f"{name}Response", 0, v0.body)
    assert got == expected
    assert _bridged(bridged, name) == 1
    with KafkaConnection(*direct, timeout=15) as conn:  # the control: v0 direct is refused
        conn.send(key, 0, messages.encode(f"{name}Request", 0, TOKEN_REQUESTS[key]))
        assert conn.expect_closed()


# A broker with Kafka's StandardAuthorizer (everyone on it is ANONYMOUS, a super user):
# the ACL v0s against real ACLs, one LITERAL and one PREFIXED.
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


@pytest.fixture(scope="module")
def authorized_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafkaBroker]:
    kafka = ApacheKafkaBroker(
        tmp_path_factory.mktemp("kafka-acls"), properties=AUTHORIZER, name="kafka-acls"
    )
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()


def test_the_acl_v0s_mean_literal_patterns_as_kafka_read_them(
    authorized_kafka: ApacheKafkaBroker, gateway_factory: GatewayFactory, unique_topic: str
) -> None:

    gw = gateway_factory(upstream=authorized_kafka.bootstrap, metrics=True)

    def acl(name: str, pattern: ACLResourcePatternType, operation: ACLOperation) -> Any:
        resource = ResourcePattern(ResourceType.TOPIC, name, pattern)
        return ACL("User:alice", "*", operation, ACLPermissionType.ALLOW, resource)

    def alices(pattern: ACLResourcePatternType) -> Any:
        resource = ResourcePatternFilter(ResourceType.TOPIC, None, pattern)
        return ACLFilter("User:alice", "*", ACLOperation.ANY, ACLPermissionType.ANY, resource)

    def seen(acls: list[Any]) -> set[tuple[str, str, str]]:
        return {
            (
                a.resource_pattern.resource_name,
                a.resource_pattern.pattern_type.name,
                a.operation.name,
            )
            for a in acls
        }

    prefix = unique_topic[:10]
    literal = (unique_topic, "LITERAL", "READ")
    prefixed = (prefix, "PREFIXED", "WRITE")
    modern = _admin(gw.bootstrap)
    old = _admin(gw.bootstrap, (1, 0))
    try:
        made = modern.create_acls(
            [acl(prefix, ACLResourcePatternType.PREFIXED, ACLOperation.WRITE)]
        )
        assert made["failed"] == []
        # CreateAcls v0: a LITERAL pattern, as v0 always meant.
        made = old.create_acls(
            [acl(unique_topic, ACLResourcePatternType.LITERAL, ACLOperation.READ)]
        )
        assert made["failed"] == []
        acls, _ = modern.describe_acls(alices(ACLResourcePatternType.ANY))
        assert seen(acls) == {literal, prefixed}
        # DescribeAcls v0: the LITERAL one only, as Kafka 3.9 answered v0.
        acls, _ = old.describe_acls(alices(ACLResourcePatternType.LITERAL))
        assert seen(acls) == {literal}
        # DeleteAcls v0: deletes and reports the LITERAL one; the PREFIXED one stays.
        ((_, matched, error),) = old.delete_acls([alices(ACLResourcePatternType.LITERAL)])
        assert error.__name__ == "NoError" and seen(matched) == {literal}
        acls, _ = modern.describe_acls(alices(ACLResourcePatternType.ANY))
        assert seen(acls) == {prefixed}
    finally:
        old.close()
        modern.close()
    for api in ("DescribeAcls", "CreateAcls", "DeleteAcls"):
        assert _bridged(gw, api) == 1, api
