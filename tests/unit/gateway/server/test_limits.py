"""Connection limits: config validation, Kafka's override syntax, and the per-worker
share (gateway/server/limits.py). The sockets side is tests/integration/test_limits.py."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from gateway.config import ConfigError, load_config, parse_ip_overrides
from gateway.observability.metrics import Metrics
from gateway.server.limit_counts import LocalCounts, SharedCounts, ip_key
from gateway.server.limits import ConnectionLimits


def test_kafka_defaults() -> None:
    cfg = load_config(None, {})
    assert cfg.connections_max_idle_ms == 600000
    assert cfg.max_connections == cfg.max_connections_per_ip == 2**31 - 1
    assert cfg.queued_max_request_bytes == 256 * 1024 * 1024


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_connections", 0),
        ("connections_max_idle_ms", -5),
        ("queued_max_request_bytes", 0),
        ("max_connection_creation_rate", "10"),
        ("max_connections_per_ip_overrides", "127.0.0.1"),
        ("max_connections_per_ip_overrides", "127.0.0.1:x"),
    ],
)
def test_bad_values_name_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {key: value})
    assert info.value.key == key


def test_overrides_as_kafka_writes_them() -> None:
    assert parse_ip_overrides("127.0.0.1:100, [::1]:5,,") == {"127.0.0.1": 100, "::1": 5}
    assert load_config(None, {"queued_max_request_bytes": -1}).queued_max_request_bytes == -1


def test_only_the_memory_budget_is_split_over_workers() -> None:
    cfg = load_config(
        None,
        {
            "max_connections": 10,
            "max_connections_per_ip": 3,
            "max_connections_per_ip_overrides": "127.0.0.2:8",
            "max_connection_creation_rate": 9,
            "queued_max_request_bytes": 1000,
        },
    )
    limits = ConnectionLimits(cfg, Metrics())
    limits.share_budget(4)
    # The caps and the rate hold gateway-wide through the shared table instead.
    assert (limits.max_connections, limits.max_per_ip, limits.budget) == (10, 3, 250)
    assert limits.per_ip_overrides == {"127.0.0.2": 8}
    assert limits.rate == 9


@pytest.fixture
def table() -> Iterator[Callable[..., list[SharedCounts]]]:
    """Open one shared table as several workers would (each its own mapping and fd)."""
    opened: list[SharedCounts] = []
    paths: list[str] = []

    def make(
        workers: int, per_ip: bool = True, max_connections: int = 100, rate: float = 1e9
    ) -> list[SharedCounts]:
        path = SharedCounts.create(workers, per_ip, max_connections, rate)
        paths.append(path)
        views = [SharedCounts(path, w, rate) for w in range(workers)]
        opened.extend(views)
        return views

    yield make
    for view in opened:
        view.close()
    for path in paths:
        os.unlink(path)


def test_shared_caps_hold_whichever_worker_accepts(table) -> None:
    a, b, c = table(3)
    assert a.admit("10.0.0.1", 100, 3, True) is None
    assert b.admit("10.0.0.1", 100, 3, True) is None
    assert c.admit("10.0.0.1", 100, 3, True) is None
    for view in (a, b, c):
        assert view.admit("10.0.0.1", 100, 3, True) == "max_connections_per_ip"
    # IPv4 seen through an IPv6 listener is the same client.
    assert b.admit("::ffff:10.0.0.1", 100, 3, True) == "max_connections_per_ip"
    assert c.admit("10.0.0.2", 4, 3, True) is None
    assert a.admit("10.0.0.3", 4, 3, True) == "max_connections"
    b.release("10.0.0.1")
    assert a.admit("10.0.0.1", 100, 3, True) is None
    assert a.total() == 4 and a.per_ip("10.0.0.1") == 3


def test_a_dead_workers_counts_are_released(table) -> None:
    a, b = table(2)
    for _ in range(3):
        assert a.admit("10.0.0.1", 5, 5, True) is None
    assert b.admit("10.0.0.1", 5, 5, True) is None
    assert b.admit("10.0.0.9", 5, 5, True) is None
    assert a.admit("10.0.0.2", 5, 5, True) == "max_connections"
    supervisor = SharedCounts(a.path, None)
    try:
        assert supervisor.clear_worker(0) == 3
    finally:
        supervisor.close()
    assert a.total() == 2 and a.per_ip("10.0.0.1") == 1 and a.per_ip("10.0.0.9") == 1
    # The restarted worker 0 releases nothing it no longer holds.
    assert a.admit("10.0.0.2", 5, 5, True) is None


def test_address_churn_never_fills_the_table(table) -> None:
    (a,) = table(1, max_connections=8)
    for i in range(5000):
        ip = f"2001:db8::{i:x}"
        assert a.admit(ip, 8, 1, True) is None, i
        a.release(ip)
    assert a.total() == 0
    ips = [f"10.1.{i >> 8}.{i & 255}" for i in range(8)]
    assert all(a.admit(ip, 100, 1, True) is None for ip in ips)
    # More live addresses than the table was sized for (2 x max_connections): refused.
    over = [a.admit(f"10.2.0.{i}", 100, 1, True) for i in range(64)]
    assert "max_connections_per_ip" in over
    assert all(a.per_ip(ip) == 1 for ip in ips)


def test_creation_rate_reserves_then_refuses_a_wait_over_the_bound(table) -> None:
    # 0.01 tokens a second: each reservation waits 100 s more than the one before, so
    # the outcome does not depend on how fast this test runs.
    for counts in [LocalCounts(0.01), table(2, rate=0.01)[1]]:
        # The bucket starts full, with 0.01 tokens: the first waits ~99 s.
        first = counts.reserve(250)
        second = counts.reserve(250)
        assert first is not None and second is not None
        assert 0 < first < second <= 250
        assert counts.reserve(250) is None  # would wait ~299 s: refused, nothing taken
        assert counts.reserve(1e9) is not None


def test_ip_keys() -> None:
    assert ip_key("127.0.0.1") == ip_key("::ffff:127.0.0.1") != ip_key("::1")
    assert len(ip_key("?")) == 16


def test_client_software_labels_past_the_cap_are_other() -> None:
    metrics = Metrics()
    metrics.max_software_labels = 2
    assert metrics.software_labels("a", "1") == ("a", "1")
    assert metrics.software_labels("b", "1") == ("b", "1")
    assert metrics.software_labels("c", "1") == ("other", "other")
    assert metrics.software_labels("a", "1") == ("a", "1")  # labelled before: kept
    assert metrics.software_overflow._value.get() == 1
