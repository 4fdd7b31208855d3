"""upgrade_target_release: the requests the next Kafka release refuses, derived from the
traffic counters at scrape time; /clients' ``breaks_on``; the key's check and its
reload on SIGHUP (a real Gateway object, no sockets)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import ConfigError, load_config, reloaded
from gateway.observability.release_watch import BELOW_TARGET, ReleaseWatch
from gateway.observability.traffic_metrics import TrafficCollector
from gateway.server.app import Gateway

PINNED = ("client-id:kafka-python-2.0.2", "unknown")
JAVA = ("apache-kafka-java", "3.9.1")


def traffic() -> TrafficCollector:
    collector = TrafficCollector()
    collector.requests = {
        ("plain", *PINNED, 0, 2): 5,  # Produce v2: 4.0 refuses it, although advertised
        ("tls", *PINNED, 0, 2): 2,  # the same client on another listener: one series
        ("plain", *PINNED, 1, 2): 3,  # Fetch v2: below 4.0's v4
        ("plain", *PINNED, 3, 1): 4,  # Metadata v1 stays
        ("plain", *JAVA, 0, 11): 100,
        ("plain", "unknown", "unknown", -1, -1): 9,  # garbage: never counted
    }
    return collector


def scrape(watch: ReleaseWatch) -> dict[tuple[str, ...], float]:
    registry = CollectorRegistry()
    registry.register(watch)
    (family,) = [
        f for f in text_string_to_metric_families(generate_latest(registry).decode())
        if f.name == BELOW_TARGET
    ]  # fmt: skip
    assert family.type == "counter"
    return {
        tuple(s.labels[k] for k in ("release", "api", "api_version", "client_software_name")):
        s.value for s in family.samples if s.name.endswith("_total")
    }  # fmt: skip


def test_requests_below_the_target_release_are_counted_by_api_version_and_client() -> None:
    watch = ReleaseWatch("4.0", traffic())
    assert scrape(watch) == {
        ("4.0", "Produce", "2", PINNED[0]): 7.0,
        ("4.0", "Fetch", "2", PINNED[0]): 3.0,
    }
    watch.set_release("3.9")
    assert scrape(watch) == {}
    watch.set_release(None)
    assert scrape(watch) == {} and not watch.refuses(0, 0)


def test_clients_are_marked_with_what_the_target_release_refuses() -> None:
    entry = {
        "identity": PINNED[0],
        "versions_used": [
            {"api_key": 0, "api": "Produce", "api_version": 2, "count": 5},
            {"api_key": 3, "api": "Metadata", "api_version": 1, "count": 4},
        ],
    }
    modern = {"identity": JAVA[0], "versions_used": [
        {"api_key": 0, "api": "Produce", "api_version": 11, "count": 1}]}  # fmt: skip
    marked = ReleaseWatch("4.0").mark([entry, modern])
    assert marked[0]["breaks_on"] == {
        "release": "4.0",
        "versions": [{"api_key": 0, "api": "Produce", "api_version": 2}],
    }
    assert marked[1]["breaks_on"] is None
    assert "breaks_on" not in ReleaseWatch(None).mark([{"versions_used": []}])[0]


def test_the_key_names_a_known_release() -> None:
    assert load_config(None, {"upgrade_target_release": "4.0"}).upgrade_target_release == "4.0"
    with pytest.raises(ConfigError, match="upgrade_target_release: unknown Apache Kafka release"):
        load_config(None, {"upgrade_target_release": "9.9"})


def test_sighup_rereads_the_target_release_and_a_bad_value_keeps_the_old(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('upgrade_target_release = "4.0"\n')
    gateway = Gateway(load_config(config, {"upstream": "127.0.0.1:9092"}))
    assert gateway.release_watch.release == "4.0"
    assert gateway.release_watch in gateway.metrics.registry._collector_to_names

    def reloads(result: str) -> float:
        return gateway.metrics.config_reloads.labels(result)._value.get()

    config.write_text('upgrade_target_release = "4.1"\n')
    gateway.reload()
    assert gateway.release_watch.release == "4.1" and reloads("ok") == 1
    config.write_text('upgrade_target_release = "7.7"\n')
    gateway.reload()
    assert gateway.release_watch.release == "4.1" and reloads("failed") == 1
    config.write_text("")
    gateway.reload()
    assert gateway.release_watch.release is None
    # Without a file the value given stands.
    load_config(None, {"upstream": "127.0.0.1:9092"})
    assert reloaded("upgrade_target_release", "4.0") == "4.0"
