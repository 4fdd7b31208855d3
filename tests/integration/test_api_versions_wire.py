"""ApiVersions negotiation, graceful unsupported versions, KIP-511/885 and KIP-700 on the wire.

Raw sockets through a real gateway in front of the session's real broker (Apache Kafka or
Tansu; Tansu itself answers a v99 ApiVersions with a v3 body and error 0, and accepts any
client software name: the gateway in front of it must behave like Kafka instead). What
depends on the broker (its ranges, its node id, its release fingerprint) is read from the
broker itself with a direct ApiVersions, which needs no address rewriting.
"""

from __future__ import annotations

import contextlib
import datetime
import re
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsV3
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_cluster.v1.response import DescribeClusterResponse
from kio.schema.metadata.v12.request import MetadataRequest as MetadataV12
from kio.schema.metadata.v13.request import MetadataRequest as MetadataV13
from kio.schema.metadata.v13.response import MetadataResponse as MetadataResponseV13
from kio.schema.produce.v12.request import PartitionProduceData, TopicProduceData
from kio.schema.produce.v12.request import ProduceRequest as ProduceV12
from kio.schema.produce.v12.response import ProduceResponse as ProduceResponseV12
from kio.static.primitive import i8, i16, i32

from gateway.bridge.plan import widen
from gateway.interceptors.api_versions import read_broker_software
from gateway.interceptors.describe_cluster import (
    read_software_per_broker,
    strip_software_per_broker,
)
from gateway.versions import fingerprint, gateway_supported
from gateway.wire import strip_unknown_tags
from tests.harness import Broker
from tests.harness.kafka_wire import ConnectionClosed, KafkaConnection, decode
from tests.harness.relay import AnsweringRelay, capped_api_versions

UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
PRODUCE, METADATA, API_VERSIONS_KEY, DESCRIBE_CLUSTER = 0, 3, 18, 60


def broker_ranges(broker: Broker) -> dict[int, tuple[int, int]]:
    """What the broker itself advertises (a direct ApiVersions v3)."""
    with KafkaConnection(broker.host, broker.port, timeout=10) as conn:
        answer = conn.api_versions(3)
    assert answer.error_code == 0
    return answer.api_keys


def intersection(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return max(a[0], b[0]), min(a[1], b[1])


def connect(gw) -> KafkaConnection:
    return KafkaConnection("127.0.0.1", gw.port, timeout=10)


def api_versions(
    conn: KafkaConnection, version: int, name: str = "tests", software_version: str = "1.0"
) -> bytes:
    body = (
        b""
        if version < 3
        else ApiVersionsRequest(client_software_name=name, client_software_version=software_version)
    )
    return conn.request(18, version, body).body


def v3(body: bytes) -> ApiVersionsV3:
    return decode(ApiVersionsV3, strip_unknown_tags(18, 3, body))


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_is_answered_with_negotiated_ranges(gateway, broker, version):
    theirs, ours = broker_ranges(broker), gateway_supported()
    if version < 3:
        # ApiVersions v0-2 come from old clients: in front of Kafka 4.x they are told
        # what the version bridge carries as well (gateway/bridge), the rest as is.
        theirs = widen(theirs, theirs)
    body = api_versions(connect(gateway), version)
    if version >= 3:
        message = v3(body)
    else:
        module = __import__(
            f"kio.schema.api_versions.v{version}.response", fromlist=["ApiVersionsResponse"]
        )
        message = decode(module.ApiVersionsResponse, body)
    assert message.error_code == 0
    ranges = {k.api_key: (k.min_version, k.max_version) for k in message.api_keys}
    # Only keys both sides have (Tansu lacks ConsumerGroupHeartbeat, 68), each within
    # both ranges; a feature level may withhold more, never offer more.
    assert set(ranges) <= set(theirs) & set(ours)
    for key, (low, high) in ranges.items():
        both = intersection(theirs[key], ours[key])
        assert both[0] <= low <= high <= both[1], (key, ranges[key], both)
    # Keys no feature gates are exactly the intersection (Tansu's Metadata max is 12,
    # below the gateway's 13; Kafka 4.4's is 13).
    for key in (METADATA, API_VERSIONS_KEY, DESCRIBE_CLUSTER):
        assert ranges[key] == intersection(theirs[key], ours[key])
    assert ranges[API_VERSIONS_KEY] == theirs[API_VERSIONS_KEY]  # Kafka 4.4: v5 (KIP-1242)


def test_too_new_api_versions_gets_kafkas_v0_error_answer(gateway, broker):
    low, high = broker_ranges(broker)[API_VERSIONS_KEY]
    conn = connect(gateway)
    body = conn.request(
        18, 99, ApiVersionsRequest(client_software_name="x", client_software_version="1")
    ).body
    message = decode(ApiVersionsV0, body)
    assert message.error_code == UNSUPPORTED_VERSION
    answered = [(k.api_key, k.min_version, k.max_version) for k in message.api_keys]
    assert answered == [(API_VERSIONS_KEY, low, high)]
    assert v3(api_versions(conn, 3)).error_code == 0  # the retry at a known version works


def test_invalid_client_software_gets_invalid_request_and_keeps_connection(gateway):
    conn = connect(gateway)
    message = v3(api_versions(conn, 3, name="bad name!"))
    assert message.error_code == INVALID_REQUEST
    assert message.api_keys == ()
    assert v3(api_versions(conn, 3, name="good-name", software_version="2.0.1")).error_code == 0
    gateway.wait_for_log(r'"client_software_name": "good-name"')


def test_broker_software_tags_are_readable_by_the_public_helper(gateway_factory):
    gw = gateway_factory(
        "--config",
        _config(gateway_factory, broker_software_name="Tansu", broker_software_version="0.6.0"),
    )
    body = api_versions(connect(gw), 3)
    assert read_broker_software(body) == ("Tansu", "0.6.0")
    assert v3(body).error_code == 0  # a client ignoring the tags still reads the rest


@pytest.fixture
def capped_gateway(gateway_factory, broker) -> Iterator:
    """``capped_gateway(key, max_version)``: a gateway whose upstream advertises ``key`` up
    to ``max_version`` only: the broker behind a relay that lowers its ApiVersions answer.
    So a version above the advertised max has a schema to send, whatever the broker
    (Kafka 4.4 advertises Metadata 13, the gateway's own max)."""
    with contextlib.ExitStack() as stack:

        def start(key: int, max_version: int):
            answers = {
                API_VERSIONS_KEY: capped_api_versions((broker.host, broker.port), key, max_version)
            }
            relay = stack.enter_context(AnsweringRelay((broker.host, broker.port), answers))
            return gateway_factory(upstream=relay.bootstrap)

        yield start


def test_metadata_above_advertised_max_gets_error_then_connection_still_works(capped_gateway):
    gateway = capped_gateway(METADATA, 12)
    conn = connect(gateway)
    advertised = {k.api_key: k.max_version for k in v3(api_versions(conn, 3)).api_keys}
    assert advertised[METADATA] == 12
    response = conn.request(
        3,
        13,
        MetadataV13(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        ),
    )
    assert decode(MetadataResponseV13, response.body).error_code == UNSUPPORTED_VERSION
    ok = conn.request(
        3,
        12,
        MetadataV12(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        ),
    )
    assert ok.body  # the same connection still serves a supported version
    gateway.wait_for_log("unsupported_version")


def test_version_beyond_every_schema_closes_like_kafka(gateway):
    conn = connect(gateway)
    conn.send(1, 99, b"", header_version=2)
    with pytest.raises(ConnectionClosed):
        conn.recv_frame(timeout=5)
    assert v3(api_versions(connect(gateway), 3)).error_code == 0


def test_produce_above_advertised_max_gets_per_partition_errors_in_requested_schema(
    capped_gateway,
):
    gateway = capped_gateway(PRODUCE, 11)
    conn = connect(gateway)
    advertised = {k.api_key: k.max_version for k in v3(api_versions(conn, 3)).api_keys}
    assert advertised[PRODUCE] == 11
    request = ProduceV12(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=1),
        topic_data=(
            TopicProduceData(
                name="any", partition_data=(PartitionProduceData(index=i32(0), records=None),)
            ),
        ),
    )
    message = decode(ProduceResponseV12, conn.request(0, 12, request).body)
    errors = [p.error_code for t in message.responses for p in t.partition_responses]
    assert errors == [UNSUPPORTED_VERSION]
    assert v3(api_versions(conn, 3)).error_code == 0  # connection still usable


def test_unknown_api_key_closes_that_connection_only(gateway):
    conn = connect(gateway)
    conn.send(4242, 0, b"", header_version=1)
    with pytest.raises(ConnectionClosed):
        conn.recv_frame(timeout=5)
    gateway.wait_for_log("unknown_api_key")
    assert v3(api_versions(connect(gateway), 3)).error_code == 0


@pytest.mark.parametrize("synthesize", [False, True], ids=["passthrough", "synthesized"])
def test_describe_cluster_lists_gateway_addresses(gateway_factory, broker, synthesize):
    args = (
        ("--config", _config(gateway_factory, synthesize_describe_cluster=True))
        if synthesize
        else ()
    )
    gw = gateway_factory(*args)
    conn = connect(gw)
    response = conn.request(
        60,
        1,
        DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=i8(1)),
    )
    message = decode(
        DescribeClusterResponse,
        strip_software_per_broker(1, strip_unknown_tags(60, 1, response.body)),
    )
    assert message.error_code == 0
    assert [(b.host, b.port) for b in message.brokers] == [("127.0.0.1", gw.port)]
    assert message.cluster_id
    assert read_broker_software(response.body, api_key=60, version=1) is not None
    # KIP-885 per broker: the one broker behind this sidecar, by its node id, as the
    # gateway fingerprints it from its ranges (Tansu: unknown; Kafka 4.4: >=4.2).
    software = tuple(fingerprint(broker_ranges(broker)))
    assert read_software_per_broker(1, response.body) == {broker.node_id: software}
    if synthesize:
        assert "dropped" not in gw.log_text()
    # And a real admin client through the same gateway.
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{gw.port}"})
    nodes = admin.describe_cluster().result(timeout=20).nodes
    assert [(n.host, n.port) for n in nodes] == [("127.0.0.1", gw.port)]


def _config(factory, **values: object) -> str:
    path = factory._workdir / f"gateway-{len(factory.processes)}.toml"
    lines = [f"{k} = {_toml(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"'


def test_featurectl_brokers_reads_broker_software_from_gateways(gateway_factory, broker):
    import json
    import subprocess
    import sys

    gw = gateway_factory(
        "--config",
        _config(gateway_factory, broker_software_name="Tansu", broker_software_version="0.6.0"),
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "featurectl.cli",
            "brokers",
            "--output",
            "json",
            "--bootstrap",
            f"127.0.0.1:{gw.port}",
            "--bootstrap",
            broker.bootstrap,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    rows = {r["address"]: (r["name"], r["version"]) for r in json.loads(out.stdout)}
    assert rows[f"127.0.0.1:{gw.port}"] == ("Tansu", "0.6.0")
    assert rows[broker.bootstrap] == (None, None)  # the broker itself adds no KIP-885 tags


def test_registry_records_real_clients_software(gateway):
    """KIP-511: librdkafka (via confluent-kafka) and kafka-python send ApiVersions v3 with
    their software name/version; the gateway records exactly what they sent."""
    import confluent_kafka
    import kafka

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{gateway.port}"})
    admin.list_topics(timeout=15)
    legacy = kafka.KafkaAdminClient(
        bootstrap_servers=f"127.0.0.1:{gateway.port}", request_timeout_ms=10000
    )
    legacy.list_topics()
    legacy.close()
    librdkafka = confluent_kafka.libversion()[0]
    gateway.wait_for_log(
        r'"client_software_name": "confluent-kafka-python", "client_software_version": '
        rf'"[0-9.]+-rdkafka-{re.escape(librdkafka)}"'
    )
    gateway.wait_for_log(
        r'"client_software_name": "kafka-python", "client_software_version": '
        rf'"{re.escape(kafka.__version__)}"'
    )
