"""Connection limits: config validation, Kafka's override syntax, and the per-worker
share (gateway/server/limits.py). The sockets side is tests/integration/test_limits.py."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, load_config, parse_ip_overrides
from gateway.observability.metrics import Metrics
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


def test_share_divides_every_gateway_wide_limit() -> None:
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
    limits.share(4)
    assert (limits.max_connections, limits.max_per_ip, limits.budget) == (3, 1, 250)
    assert limits.per_ip_overrides == {"127.0.0.2": 2}
    assert limits.rate == 2.25
