"""Metadata responses stream through the gateway with only their brokers rewritten.

Real Tansu, a real gateway process, every Metadata version both support: the response
through the gateway must be byte for byte what the buffered rewrite
(``rewrite_response`` on the whole body) makes of Tansu's own answer, in sidecar and in
cluster mode. The expected brokers come from the gateway's answer (where it advertises
each node is its routing's business, tested elsewhere); what this pins down is that
nothing else changed and that the streamed frame's length and encoding are exact.
"""

from __future__ import annotations

from typing import Any

from kio.index import load_request_schema, load_response_schema

from gateway.interceptors.addresses import rewrite_response
from tests.harness import KafkaConnection
from tests.harness.kafka_wire import decode, is_flexible
from tests.harness.ports import free_port

METADATA = 3


class AnswerBook:
    """Advertises each node where the gateway's own answer put it."""

    def __init__(self, brokers: dict[int, tuple[str, int]]) -> None:
        self.brokers = brokers

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        return self.brokers[node_id]


def _request(version: int) -> Any:
    cls = load_request_schema(METADATA, version)
    fields: dict[str, Any] = {"topics": () if version == 0 else None}
    names = set(cls.__dataclass_fields__)
    for flag in (
        "allow_auto_topic_creation",
        "include_cluster_authorized_operations",
        "include_topic_authorized_operations",
    ):
        if flag in names:
            fields[flag] = False
    return cls(**fields)


def _metadata(port: int, version: int) -> bytes:
    conn = KafkaConnection("127.0.0.1", port)
    return conn.request(METADATA, version, _request(version)).body


def _versions(port: int) -> list[int]:
    versions = []
    for version in range(0, 13):
        try:
            _metadata(port, version)
        except Exception:
            continue
        versions.append(version)
    return versions


def _assert_streamed_equals_buffered(direct_port: int, gateway_port: int) -> list[int]:
    versions = _versions(direct_port)
    assert versions, "the broker answered no Metadata version"
    for version in versions:
        direct = _metadata(direct_port, version)
        through = _metadata(gateway_port, version)
        schema = load_response_schema(METADATA, version)
        advertised = {b.node_id: (b.host, b.port) for b in decode(schema, through).brokers}
        original = {b.node_id: (b.host, b.port) for b in decode(schema, direct).brokers}
        assert advertised.keys() == original.keys()
        assert advertised != original, "the brokers were not rewritten"
        expected = bytes(rewrite_response(METADATA, version, direct, AnswerBook(advertised)))
        assert through == expected, f"Metadata v{version} (flexible={is_flexible(3, version)})"
    return versions


def test_sidecar_metadata_is_the_buffered_rewrite_byte_for_byte(gateway, broker) -> None:
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    versions = _assert_streamed_equals_buffered(port, gateway.port)
    assert 0 in versions and max(versions) >= 9  # classic and flexible


def test_cluster_mode_metadata_is_the_buffered_rewrite_byte_for_byte(
    gateway_factory, broker_factory, tmp_path
) -> None:
    tansu = broker_factory(advertised_host="127.0.0.1")
    config = tmp_path / "cluster.toml"
    config.write_text(f'mode = "cluster"\n[cluster.ports]\n111 = {free_port()}\n')
    gw = gateway_factory("--config", str(config), upstream=tansu.bootstrap)
    _assert_streamed_equals_buffered(int(tansu.bootstrap.rsplit(":", 1)[1]), gw.port)
