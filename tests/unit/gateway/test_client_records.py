"""The bounded record of client identities (/clients), the client-id labels, and the
attribution of connections and refusals to identities."""

from __future__ import annotations

import json
import struct
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest

from gateway.client_records import (
    PEER_SLOTS,
    TOP_PEERS,
    ClientRecords,
    api_labels,
    fingerprint,
    identity_of_client_id,
    merge_snapshots,
    peer_ip,
)
from gateway.clients import ConnectionRegistry
from gateway.observability.metrics import Metrics
from gateway.protocol import api_spec
from gateway.protocol._stats import ApiStats


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def request_header(key: int, version: int, client_id: str | None, body: bytes = b"") -> bytes:
    """A request frame as a client sends it: size, key, version, correlation id,
    client id, and an empty tagged section where the header is v2 (flexible versions)."""
    if client_id is None:
        cid = struct.pack(">h", -1)
    else:
        raw = client_id.encode()
        cid = struct.pack(">h", len(raw)) + raw
    spec = api_spec(key)
    if spec is not None and spec.request_header_version(version) == 2:
        cid += b"\x00"
    payload = struct.pack(">hhi", key, version, 7) + cid + body
    return struct.pack(">i", len(payload)) + payload


def connection(registry: ConnectionRegistry, metrics: Metrics, peer: str = "10.0.0.1:5000"):
    info = registry.add(peer, "plain")
    gateway = SimpleNamespace(
        config=SimpleNamespace(max_client_identities=100), metrics=metrics, registry=registry
    )
    return SimpleNamespace(info=info, listener="plain", gateway=gateway)


@pytest.mark.parametrize(
    ("client_id", "label"),
    [
        ("producer-1", "client-id:producer"),
        ("producer-2", "client-id:producer"),
        ("kafka-python-producer-1", "client-id:kafka-python-producer"),
        ("kafka-python-2.0.2", "client-id:kafka-python-2.0.2"),
        ("consumer-orders-12-3", "client-id:consumer-orders"),
        ("rdkafka", "client-id:rdkafka"),
        ("spark-0e9c4a4e-3a4b-4a1c-9b1e-2f6f0f0e1a2b-executor", "client-id:spark-*-executor"),
        ("app-5f3a9c0d1e2b4a6f", "client-id:app-*"),
        ("  ", None),
        ("", None),
        (None, None),
        ("x" * 300, "client-id:" + "x" * 64),
        ("naïve\n", "client-id:na?ve"),
        ("1234", "client-id:1234"),
    ],
)
def test_a_client_id_becomes_a_bounded_label(client_id: str | None, label: str | None) -> None:
    assert identity_of_client_id(client_id) == label


def test_known_keys_keep_their_versions_up_to_the_bound() -> None:
    assert api_labels(0, 2) == (0, 2)  # Produce v2: Kafka 4 removed it, still Produce
    assert api_labels(3, 127) == (3, 127)
    assert api_labels(3, 128) == (-1, -1)
    assert api_labels(3, -1) == (-1, -1)
    assert api_labels(9999, 0) == (-1, -1)


def test_peer_ip_and_fingerprint() -> None:
    assert peer_ip("10.0.0.1:5000") == "10.0.0.1"
    assert peer_ip("[::1]:5000") == "::1"
    assert peer_ip("?") == "?"
    assert fingerprint([]) == ""
    assert fingerprint([(3, 1), (0, 2)]) == fingerprint([(0, 2), (3, 1), (3, 1)])
    assert fingerprint([(3, 1)]) != fingerprint([(3, 2)])


def test_the_least_recently_seen_identity_is_evicted_first() -> None:
    clock = Clock()
    records = ClientRecords(limit=2, clock=clock)
    a = records.record(("unknown", "unknown", "a"), ("client-id:a", "unknown"))
    clock.now += 1
    records.record(("unknown", "unknown", "b"), ("client-id:b", "unknown"))
    clock.now += 1
    records.seen(a)  # a is more recent than b now
    clock.now += 1
    records.record(("unknown", "unknown", "c"), ("client-id:c", "unknown"))
    assert [r["client_id"] for r in records.snapshot()] == ["a", "c"]
    assert records.evicted == 1
    assert a.last_seen == clock.now - 1


def test_identities_with_live_connections_are_kept_over_idle_ones() -> None:
    clock = Clock()
    records = ClientRecords(limit=2, clock=clock)
    live = records.record(("unknown", "unknown", "live"), ("client-id:live", "unknown"))
    live.opened("10.0.0.1")
    clock.now += 1
    records.record(("unknown", "unknown", "idle"), ("client-id:idle", "unknown"))
    clock.now += 1
    records.record(("unknown", "unknown", "new"), ("client-id:new", "unknown"))
    assert [r["client_id"] for r in records.snapshot()] == ["live", "new"]


def test_an_evicted_identity_still_in_use_comes_back_with_its_counts() -> None:
    records = ClientRecords(limit=1)
    old = records.record(("unknown", "unknown", "old"), ("client-id:old", "unknown"))
    old.opened("10.0.0.1")
    records.record(("unknown", "unknown", "new"), ("client-id:new", "unknown"))
    records.record(("unknown", "unknown", "newer"), ("client-id:newer", "unknown"))
    records.seen(old)
    [entry] = records.snapshot()
    assert entry["client_id"] == "old" and entry["connections_opened"] == 1


def test_peers_are_the_top_n_by_connections_out_of_a_bounded_set() -> None:
    record = ClientRecords().record(("unknown", "unknown", "c"), ("client-id:c", "unknown"))
    for i in range(TOP_PEERS + 3):
        for _ in range(i + 1):
            record.opened(f"10.0.0.{i}")
    for i in range(100):  # a flood of one-off addresses does not push the busy ones out
        record.opened(f"192.168.0.{i}")
    assert len(record.peers) <= PEER_SLOTS
    peers = record.as_dict()["peers"]
    assert [p["ip"] for p in peers] == [f"10.0.0.{i}" for i in range(TOP_PEERS + 2, 2, -1)]
    assert peers[0]["connections"] == TOP_PEERS + 3
    assert record.connections_opened == sum(range(1, TOP_PEERS + 4)) + 100


def test_a_pinned_client_is_labelled_by_its_first_requests_client_id_and_recorded() -> None:
    clock = Clock()
    metrics = Metrics()
    registry = ConnectionRegistry(clock=clock)
    conn = connection(registry, metrics)
    metrics.connections_active.labels("plain", "unknown", "unknown").inc()
    frame = request_header(3, 1, "legacy-app-7", b"\x00" * 20)  # Metadata v1
    registry.first_read(conn, frame[:9])  # a header split over reads
    assert conn.info.awaiting_first and conn.info.client_id is None
    registry.first_read(conn, frame[9:])
    info = conn.info
    assert not info.awaiting_first and info.client_id == "legacy-app-7"
    assert info.labels == ("client-id:legacy-app", "unknown")
    gauge = metrics.connections_active
    assert gauge.labels("plain", "client-id:legacy-app", "unknown")._value.get() == 1
    assert gauge.labels("plain", "unknown", "unknown")._value.get() == 0

    stats = ApiStats()
    stats.count_request(3, 1)
    stats.count_request(0, 2)
    info.used(stats)
    metrics.refused("unsupported_version", "plain", info, 0, 2)
    clock.now += 5
    registry.remove(info.connection_id)
    [record] = registry.identities_snapshot()
    assert json.loads(json.dumps(record)) == record
    assert record["client_id"] == "legacy-app-7" and record["identity"] == "client-id:legacy-app"
    assert record["software_name"] == "unknown"
    assert record["peers"] == [{"ip": "10.0.0.1", "connections": 1}]
    assert (record["connections_opened"], record["connections_active"]) == (1, 0)
    assert record["last_seen"] - record["first_seen"] == 5
    assert record["versions_used"] == [
        {"api_key": 0, "api": "Produce", "api_version": 2, "count": 1},
        {"api_key": 3, "api": "Metadata", "api_version": 1, "count": 1},
    ]
    assert record["versions_refused"] == [
        {
            "api_key": 0,
            "api": "Produce",
            "api_version": 2,
            "reason": "unsupported_version",
            "count": 1,
        }
    ]
    assert record["fingerprint"] == fingerprint([(0, 2), (3, 1)])
    text = generate_latest(metrics.registry).decode()
    assert (
        'kafka_gateway_rejected_requests_total{api="Produce",api_key="0",api_version="2",'
        'client_software_name="client-id:legacy-app",client_software_version="unknown",'
        'listener="plain",reason="unsupported_version"} 1.0'
    ) in text
    assert "10.0.0.1" not in text


def test_kip511_software_wins_and_counts_before_it_move_over() -> None:
    metrics = Metrics()
    registry = ConnectionRegistry()
    conn = connection(registry, metrics)
    registry.first_read(conn, request_header(18, 3, "rdkafka"))  # ApiVersions v3
    info = conn.info
    assert info.labels == ("unknown", "unknown")  # waits for the software name
    assert info.record is None
    stats = ApiStats()
    stats.count_request(18, 3)
    info.used(stats)  # before the answer: kept for the identity to come
    registry.set_software(info.connection_id, "librdkafka", "2.6.1")
    info.labels = metrics.software_labels("librdkafka", "2.6.1")
    [record] = registry.identities_snapshot()
    assert (record["software_name"], record["client_id"], record["identity"]) == (
        "librdkafka",
        "rdkafka",
        "librdkafka",
    )
    assert record["versions_used"][0]["api"] == "ApiVersions"
    assert record["connections_opened"] == 1


def test_a_connection_identified_twice_counts_once() -> None:
    metrics = Metrics()
    registry = ConnectionRegistry()
    conn = connection(registry, metrics)
    registry.first_read(conn, request_header(18, 0, "app-1"))  # ApiVersions v0: no name
    info = conn.info
    assert info.labels == ("client-id:app", "unknown")
    registry.set_software(info.connection_id, "java", "3.9")  # a later v3 names it
    opened = {r["software_name"]: r["connections_opened"] for r in registry.identities_snapshot()}
    assert opened == {"unknown": 0, "java": 1}


def test_a_connection_closed_before_a_request_counts_for_unknown() -> None:
    registry = ConnectionRegistry()
    info = registry.add("10.0.0.9:1", "plain")
    registry.remove(info.connection_id)
    [record] = registry.identities_snapshot()
    assert (record["identity"], record["client_id"], record["connections_opened"]) == (
        "unknown",
        "",
        1,
    )


def test_refusals_without_a_connection_or_request_go_to_the_unattributed_series() -> None:
    metrics = Metrics()
    metrics.refused("oversize_frame", "plain")
    text = generate_latest(metrics.registry).decode()
    assert (
        'kafka_gateway_rejected_requests_total{api="Unknown",api_key="-1",api_version="-1",'
        'client_software_name="unknown",client_software_version="unknown",'
        'listener="plain",reason="oversize_frame"} 1.0'
    ) in text
    # Each reason has a zero series from the start (rate() and the dashboard need it).
    assert text.count('reason="gated_by_feature"') == 1


def test_client_id_labels_share_the_software_label_cap() -> None:
    metrics = Metrics()
    metrics.max_software_labels = 1
    registry = ConnectionRegistry()
    first, second = connection(registry, metrics), connection(registry, metrics)
    registry.first_read(first, request_header(3, 1, "a-1"))
    registry.first_read(second, request_header(3, 1, "b-1"))
    assert first.info.labels == ("client-id:a", "unknown")
    assert second.info.labels == ("other", "other")
    assert second.info.record is not None and second.info.record.identity == "other"


def test_garbage_and_header_v0_first_requests_end_the_wait() -> None:
    registry = ConnectionRegistry()
    metrics = Metrics()
    garbage = connection(registry, metrics)
    registry.first_read(garbage, b"\x00\x00\x00\x01" + b"\x00" * 10)
    assert not garbage.info.awaiting_first and garbage.info.labels == ("unknown", "unknown")
    v0 = connection(registry, metrics)
    registry.first_read(v0, struct.pack(">ihhi", 8, 7, 0, 1) + b"\x00\x00")  # ControlledShutdown v0
    assert not v0.info.awaiting_first and v0.info.client_id is None
    null = connection(registry, metrics)
    registry.first_read(null, request_header(3, 1, None))
    assert not null.info.awaiting_first and null.info.labels == ("unknown", "unknown")


def test_the_supervisor_merges_workers_records_by_identity() -> None:
    clock = Clock()
    parts = []
    for n, ip in enumerate(("10.0.0.1", "10.0.0.2")):
        records = ClientRecords(clock=clock)
        record = records.record(
            ("unknown", "unknown", "legacy-app-7"), ("client-id:legacy-app", "unknown")
        )
        record.opened(ip)
        record.add_used({(0, 2): 2 + n})
        record.add_refused(0, 2, "unsupported_version", 2 + n)
        record.bridged = 1 + n  # requests the version bridge converted
        clock.now += 10
        records.seen(record)
        parts.append(records.snapshot())
    [merged] = merge_snapshots(parts)
    assert merged["connections_opened"] == 2
    assert {p["ip"] for p in merged["peers"]} == {"10.0.0.1", "10.0.0.2"}
    assert merged["versions_used"] == [
        {"api_key": 0, "api": "Produce", "api_version": 2, "count": 5}
    ]
    assert merged["versions_refused"][0]["count"] == 5
    assert merged["bridged_requests"] == 3
    assert merged["first_seen"] == 1_700_000_000.0 and merged["last_seen"] == 1_700_000_020.0
    assert merged["fingerprint"] == fingerprint([(0, 2)])


def test_principals_are_counted_per_connection_and_merged_across_workers() -> None:
    metrics = Metrics()
    registry = ConnectionRegistry()
    tls = registry.add("10.0.0.1:5000", "plain", principal="User:ops")  # a certificate's
    registry.first_read(connection_of(registry, metrics, tls), request_header(17, 1, "app"))
    sasl = connection(registry, metrics)
    registry.first_read(sasl, request_header(17, 1, "app"))
    info = sasl.info
    assert info.principal is None  # attributed before its login ended
    registry.set_principal(info, "User:alice", "SCRAM-SHA-512", "authenticated")
    registry.set_principal(info, "User:alice", "SCRAM-SHA-512", "authenticated")  # KIP-368
    assert (info.principal, info.sasl_mechanism, info.sasl_login) == (
        "User:alice",
        "SCRAM-SHA-512",
        "authenticated",
    )
    assert info.log_fields()["principal"] == "User:alice"
    assert info.as_dict()["sasl_mechanism"] == "SCRAM-SHA-512"
    registry.set_principal(info, None, "SCRAM-SHA-512", "failed")  # a failed re-login
    assert info.principal is None and "principal" not in info.log_fields()
    [record] = registry.identities_snapshot()
    assert record["principals"] == [
        {"principal": "User:alice", "connections": 1},
        {"principal": "User:ops", "connections": 1},
    ]
    twice = merge_snapshots([[record], [record]])[0]["principals"]
    assert twice == [
        {"principal": "User:alice", "connections": 2},
        {"principal": "User:ops", "connections": 2},
    ]
    older = {k: v for k, v in record.items() if k != "principals"}  # before principals
    assert merge_snapshots([[older]])[0]["principals"] == []


def connection_of(registry: ConnectionRegistry, metrics: Metrics, info):
    gateway = SimpleNamespace(
        config=SimpleNamespace(max_client_identities=100), metrics=metrics, registry=registry
    )
    return SimpleNamespace(info=info, listener="plain", gateway=gateway)
