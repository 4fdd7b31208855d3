"""The KIP-511 connection registry."""

from __future__ import annotations

import json

import pytest

from gateway.client_info import ClientInfo
from gateway.clients import ConnectionRegistry


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_new_connections_are_unknown_and_numbered_in_order() -> None:
    registry = ConnectionRegistry(clock=Clock())
    first = registry.add("10.0.0.1:50000", "PLAINTEXT")
    second = registry.add("10.0.0.2:50001", "PLAINTEXT", client_id="producer-1")
    assert (first.connection_id, second.connection_id) == (1, 2)
    assert first.software == ("unknown", "unknown")
    assert first.client_id is None
    assert second.client_id == "producer-1"
    assert (first.requests, first.bytes_in, first.bytes_out) == (0, 0, 0)
    assert len(registry) == 2


def test_explicit_ids_and_duplicates() -> None:
    registry = ConnectionRegistry()
    registry.add("p:1", "L", connection_id=40)
    with pytest.raises(ValueError):
        registry.add("p:2", "L", connection_id=40)
    assert 40 in registry


def test_get_and_remove() -> None:
    registry = ConnectionRegistry()
    info = registry.add("p:1", "L")
    assert registry.get(info.connection_id) is info
    assert registry.remove(info.connection_id) is info
    assert registry.get(info.connection_id) is None
    assert registry.remove(info.connection_id) is None
    assert len(registry) == 0


def test_set_software() -> None:
    registry = ConnectionRegistry()
    info = registry.add("p:1", "L")
    assert registry.set_software(info.connection_id, "librdkafka", "2.5.0")
    assert info.software == ("librdkafka", "2.5.0")
    assert not registry.set_software(999, "x", "y")


def test_counters() -> None:
    info = ConnectionRegistry().add("p:1", "L", client_id="a")
    info.on_request(100)
    info.on_request(50, client_id="b")
    info.on_response(2000)
    info.on_response(1)
    assert (info.requests, info.bytes_in, info.bytes_out) == (2, 150, 2001)
    assert info.client_id == "b"
    info.on_request(1, client_id=None)  # header v0 has no client id: keep the last one
    assert info.client_id == "b"


def test_snapshot_is_json_ready() -> None:
    clock = Clock(1_700_000_000.5)
    registry = ConnectionRegistry(clock=clock)
    info = registry.add("10.0.0.1:50000", "EXTERNAL", client_id="c1")
    clock.now += 10
    registry.add("10.0.0.2:50001", "INTERNAL")
    registry.set_software(info.connection_id, "apache-kafka-java", "3.7.0")
    info.on_request(10)
    snapshot = registry.snapshot()
    assert json.loads(json.dumps(snapshot)) == snapshot
    assert snapshot[0] == {
        "connection_id": 1,
        "peer": "10.0.0.1:50000",
        "listener": "EXTERNAL",
        "client_id": "c1",
        "software_name": "apache-kafka-java",
        "software_version": "3.7.0",
        "principal": None,
        "sasl_mechanism": None,
        "sasl_login": None,
        "connected_since": 1_700_000_000.5,
        "connected_since_iso": "2023-11-14T22:13:20.500000+00:00",
        "requests": 1,
        "bytes_in": 10,
        "bytes_out": 0,
        "bridged_requests": 0,
    }
    assert snapshot[1]["connected_since"] == 1_700_000_010.5
    assert snapshot[1]["software_name"] == "unknown"


def test_snapshot_is_a_copy() -> None:
    registry = ConnectionRegistry()
    info = registry.add("p:1", "L")
    snapshot = registry.snapshot()
    info.on_request(5)
    assert snapshot[0]["requests"] == 0


def test_count_by_software() -> None:
    registry = ConnectionRegistry()
    for _ in range(2):
        c = registry.add("p", "EXTERNAL")
        registry.set_software(c.connection_id, "librdkafka", "2.5.0")
    registry.add("p", "EXTERNAL")
    registry.add("p", "INTERNAL")
    assert registry.count_by_software() == {
        ("EXTERNAL", "librdkafka", "2.5.0"): 2,
        ("EXTERNAL", "unknown", "unknown"): 1,
        ("INTERNAL", "unknown", "unknown"): 1,
    }


def test_iteration_tolerates_removal() -> None:
    registry = ConnectionRegistry()
    for n in range(3):
        registry.add(f"p:{n}", "L")
    for info in registry:
        registry.remove(info.connection_id)
    assert len(registry) == 0


def test_log_fields_and_repr() -> None:
    info = ClientInfo(7, "h:1", "L", 0.0, client_id="c")
    assert info.log_fields() == {
        "connection_id": 7,
        "peer": "h:1",
        "client_id": "c",
        "client_software_name": "unknown",
        "client_software_version": "unknown",
    }
    assert "h:1" in repr(info)


def test_client_info_has_no_dict() -> None:
    # Slotted: a typo in a hot-path counter name fails loudly instead of adding a field.
    info = ClientInfo(1, "h:1", "L", 0.0)
    with pytest.raises(AttributeError):
        info.requets = 1  # type: ignore[attr-defined]
