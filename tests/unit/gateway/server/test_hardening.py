"""Issue 13's small parts: the bad-input log limiter and the new settings' validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from gateway.config import ConfigError, load_config
from gateway.observability.logging import MAX_KEYS_PER_EVENT, RateLimitedLogger
from gateway.observability.traffic_metrics import TrafficCollector
from gateway.protocol._stats import ApiStats


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_limiter_keeps_a_burst_per_event_and_reports_the_rest_on_the_next_line() -> None:
    RateLimitedLogger.configure(3, 10.0)
    clock = Clock()
    limited = RateLimitedLogger("test", clock)
    with structlog.testing.capture_logs() as logs:
        for _ in range(100):
            limited.warning("request.rejected", peer="a")
        limited.warning("connection.protocol_violation")  # its own budget
        clock.now = 10.0
        limited.warning("request.rejected", peer="b")
    rejected = [line for line in logs if line["event"] == "request.rejected"]
    assert len(rejected) == 4
    assert "suppressed" not in rejected[0]
    assert rejected[-1]["suppressed"] == 97 and rejected[-1]["peer"] == "b"
    assert [line["event"] for line in logs].count("connection.protocol_violation") == 1
    RateLimitedLogger.configure(10, 10.0)


def test_limiter_with_a_limit_key_keeps_a_budget_per_key() -> None:
    RateLimitedLogger.configure(1, 10.0)
    clock = Clock()
    limited = RateLimitedLogger("test", clock)
    with structlog.testing.capture_logs() as logs:
        for _ in range(5):
            limited.info("request.unknown_api_key_forwarded", limit_key=10000)
        limited.info("request.unknown_api_key_forwarded", limit_key=-13567)  # its own budget
        clock.now = 10.0
        limited.info("request.unknown_api_key_forwarded", limit_key=10000)
    assert [line.get("suppressed") for line in logs] == [None, None, 4]
    RateLimitedLogger.configure(10, 10.0)


def test_limiter_gives_only_so_many_keys_a_budget_of_their_own() -> None:
    """A client chooses the key (a fuzzer sends every API key): the keys after the first
    MAX_KEYS_PER_EVENT share one budget, so varying the key cannot flood the log."""
    RateLimitedLogger.configure(2, 10.0)
    limited = RateLimitedLogger("test", Clock())
    with structlog.testing.capture_logs() as logs:
        for key in range(10_000):
            for _ in range(3):
                limited.warning("request.rejected", limit_key=key, api_key=key)
    assert len(logs) == 2 * MAX_KEYS_PER_EVENT + 2
    assert [line["api_key"] for line in logs[: 2 * MAX_KEYS_PER_EVENT : 2]] == list(
        range(MAX_KEYS_PER_EVENT)
    )
    shared = [line["api_key"] for line in logs[2 * MAX_KEYS_PER_EVENT :]]
    assert shared == [MAX_KEYS_PER_EVENT, MAX_KEYS_PER_EVENT]
    RateLimitedLogger.configure(10, 10.0)


def _load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    load_config(str(path))


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[log]\nbad_input_burst = 0\n", "log_bad_input_burst"),
        ("[log]\nbad_input_interval_s = 0\n", "log_bad_input_interval_s"),
        ('[tls]\nprincipal_mapping_rules = "RULE:x"\n', "tls.principal_mapping_rules"),
        ('[features]\nupdate_allowed_principals = ["ops"]\n', "features_update_allowed_principals"),
        ('zookeeper_sasl = "nopassword"\n', "zookeeper_sasl"),
        ('[zookeeper_tls]\nca = "/nonexistent.pem"\n', "zookeeper_tls_ca"),
        ('[zookeeper_tls]\nenabled = true\ncert = "/etc/hostname"\n', "zookeeper_tls.key"),
    ],
)
def test_bad_hardening_settings_name_their_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, text)
    assert info.value.key == key


def test_hardening_settings_load_from_their_tables(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        'zookeeper_sasl = "gw:pw"\n'
        '[tls]\nprincipal_mapping_rules = "RULE:^CN=([^,]+),.*$/$1/L,DEFAULT"\n'
        '[features]\nupdate_allowed_principals = ["User:ops"]\n'
        "[zookeeper_tls]\nenabled = true\ncheck_hostname = false\n"
        "[log]\nbad_input_burst = 5\nbad_input_interval_s = 2.5\n"
    )
    cfg = load_config(str(path))
    assert cfg.features_update_allowed_principals == ("User:ops",)
    assert cfg.zookeeper_tls and not cfg.zookeeper_tls_check_hostname
    assert (cfg.log_bad_input_burst, cfg.log_bad_input_interval_s) == (5, 2.5)


def test_request_counts_for_keys_and_versions_without_a_schema_share_one_series() -> None:
    collector = TrafficCollector()
    who = ("sidecar", "fuzz", "1")
    for key, version in ((3, 12), (999, 0), (3, 32000), (-5, 7)):
        stats = ApiStats()
        stats.requests[(key, version)] = 1
        collector.fold(who, stats, 0, 0)
    assert collector.requests == {(*who, 3, 12): 1, (*who, -1, -1): 3}
