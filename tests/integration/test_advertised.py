"""Advertised overrides: the address the gateway listens on need not be the one it
advertises. A socat port forward stands in for a load balancer or a NodePort; the
client knows only the forwarded ports, and every broker address the gateway writes
(Metadata, FindCoordinator, DescribeCluster, KIP-951 NodeEndpoints) names them.
The session broker (Apache Kafka or Tansu) advertises an unreachable host, so nothing
works unless those rewrites are right. A single broker sends no NodeEndpoints (they come
with a leader change), so for those a relay in front of it answers one Produce with a
NOT_LEADER_OR_FOLLOWER response that carries them, as a broker would after a leader moved.
"""

from __future__ import annotations

import struct
from datetime import timedelta

import pytest
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.produce.v10.request import ProduceRequest
from kio.schema.produce.v10.response import ProduceResponse
from kio.static.primitive import i8, i16

from tests.conftest import require_tool
from tests.harness import LOOPBACK, KafkaConnection, decode, encode, free_port
from tests.harness.relay import AnsweringRelay
from tests.integration.test_clients import ConfluentDriver
from tests.integration.test_features import wait_for
from tests.integration.test_sni import describe_cluster, metadata
from tests.integration.test_tls import PortForward
from tests.unit.gateway.interceptors.test_addresses import ENDPOINTS, produce_response

PRODUCE_VERSION = 10  # the first with NodeEndpoints (KIP-951)


@pytest.fixture
def port_forward(tmp_path):
    """``port_forward(upstream)``: a started socat forwarding a fresh port there."""
    require_tool("socat")
    started: list[PortForward] = []

    def start(upstream: str) -> PortForward:
        part = PortForward(tmp_path, upstream, name=f"forward-{len(started) + 1}")
        started.append(part)
        return part.start()

    yield start
    for part in reversed(started):
        part.stop()


def advertised(port: int) -> dict[str, list[tuple[int, str, int]]]:
    """Every broker address a client sees through the gateway at LOOPBACK:port.

    FindCoordinator is retried as a real client does: Apache Kafka answers
    COORDINATOR_NOT_AVAILABLE (node -1) until __consumer_offsets exists, which the first
    lookup creates."""
    with KafkaConnection(LOOPBACK, port, timeout=10) as conn:

        def coordinator_found():
            found = conn.request_entity(FindCoordinatorRequest(key="advertised", key_type=i8(0)))
            return found if found.error_code == 0 else None

        meta = metadata(conn)
        coordinator = wait_for(coordinator_found, timeout=60, what="a group coordinator")
        described = describe_cluster(conn)
    return {
        "Metadata": [(b.node_id, b.host, b.port) for b in meta.brokers],
        "FindCoordinator": [(coordinator.node_id, coordinator.host, coordinator.port)],
        "DescribeCluster": [(b.broker_id, b.host, b.port) for b in described.brokers],
    }


def round_trip(bootstrap: str, topic: str) -> None:
    """librdkafka creates ``topic``, produces and reads back, knowing only ``bootstrap``."""
    driver = ConfluentDriver()
    driver.create_topic(bootstrap, topic)
    driver.produce(bootstrap, topic, [b"through", b"the forward"], acks="all")
    assert driver.consume_assigned(bootstrap, topic, 2) == [b"through", b"the forward"]


def test_sidecar_advertises_the_port_forward_in_front_of_it(
    gateway_factory, broker, port_forward, unique_topic
):
    listen = free_port()
    forward = port_forward(f"{LOOPBACK}:{listen}")
    gw = gateway_factory("--advertised-port", str(forward.port), port=listen)
    seen = advertised(forward.port)
    assert seen == {api: [(broker.node_id, LOOPBACK, forward.port)] for api in seen}
    # A real client given only the forwarded port works end to end.
    round_trip(forward.address, unique_topic)
    assert gw.port == listen != forward.port


def test_cluster_mode_advertises_a_per_broker_override(
    gateway_factory, broker, port_forward, tmp_path, unique_topic
):
    bootstrap, broker_port = free_port(), free_port()
    front = port_forward(f"{LOOPBACK}:{bootstrap}")
    broker_front = port_forward(f"{LOOPBACK}:{broker_port}")
    node = broker.node_id
    config = tmp_path / "cluster.toml"
    config.write_text(
        'mode = "cluster"\n'
        "[cluster.ports]\n"
        f"{node} = {broker_port}\n"
        "[cluster.broker_upstreams]\n"  # the broker advertises an unreachable host
        f'{node} = "{broker.bootstrap}"\n'
        "[cluster.advertised_brokers]\n"
        f'{node} = "{broker_front.address}"\n'
    )
    gateway_factory("--config", str(config), port=bootstrap)
    seen = advertised(front.port)
    assert seen == {api: [(node, LOOPBACK, broker_front.port)] for api in seen}
    round_trip(front.address, unique_topic)


def test_kip951_node_endpoints_name_the_port_forward(gateway_factory, broker, port_forward):
    def leader_moved(correlation_id: int, _request: bytes) -> bytes:
        # Response header v1 (Produce v9+ is flexible): correlation id, no tags.
        return struct.pack(">ib", correlation_id, 0) + encode(
            produce_response(PRODUCE_VERSION, ENDPOINTS)
        )

    listen = free_port()
    forward = port_forward(f"{LOOPBACK}:{listen}")
    with AnsweringRelay((broker.host, broker.port), {0: leader_moved}) as relay:
        gateway_factory(
            "--advertised-port", str(forward.port), port=listen, upstream=relay.bootstrap
        )
        with KafkaConnection(LOOPBACK, forward.port, timeout=10) as conn:
            request = ProduceRequest(
                transactional_id=None, acks=i16(-1), timeout=timedelta(seconds=1), topic_data=()
            )
            response = conn.request(0, PRODUCE_VERSION, request)
        assert len(relay.answered) == 1  # the produce went through the gateway to the relay
    answer = decode(ProduceResponse, response.body)
    assert [(e.node_id, e.host, e.port) for e in answer.node_endpoints] == [
        (e["node_id"], LOOPBACK, forward.port) for e in ENDPOINTS
    ]
