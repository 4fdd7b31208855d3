"""The supervisor's /metrics merge (observability.merge) on real prometheus-client output."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.merge import MetricsMerger, parse
from gateway.observability.metrics import Metrics


def worker(connections: int, epoch: int, active: int) -> str:
    m = Metrics()
    for _ in range(connections):
        m.connections_total.labels("sidecar").inc()
    m.feature_epoch.set(epoch)
    m.connections_active.labels("sidecar", "librdkafka", "2.5").set(active)
    return generate_latest(m.registry).decode()


def values(merger: MetricsMerger, texts: list[str]) -> dict[tuple[str, str], float]:
    from prometheus_client import CollectorRegistry

    class Fixed:
        def collect(self):  # type: ignore[no-untyped-def]
            return merger.merge([parse(t) for t in texts])

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())  # type: ignore[arg-type]
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            out[(sample.name, str(sorted(sample.labels.items())))] = sample.value
    return out


SIDECAR = str([("listener", "sidecar")])
ACTIVE = str(
    [
        ("client_software_name", "librdkafka"),
        ("client_software_version", "2.5"),
        ("listener", "sidecar"),
    ]
)


def test_counters_and_amounts_add_up_and_the_epoch_is_the_oldest_served() -> None:
    merged = values(MetricsMerger(), [worker(3, 7, 2), worker(4, 6, 5)])
    assert merged[("kafka_gateway_connections_total", SIDECAR)] == 7
    assert merged[("kafka_gateway_connections_active", ACTIVE)] == 7
    assert merged[("kafka_gateway_feature_finalized_epoch", "[]")] == 6
    assert merged[("kafka_gateway_healthy", "[]")] == 1  # min of 1 and 1, not 2


def test_a_dead_workers_counters_stay_in_the_sum_but_its_gauges_go() -> None:
    merger = MetricsMerger()
    dead = worker(10, 7, 4)
    merger.retire(parse(dead))
    merged = values(merger, [worker(1, 7, 1)])
    assert merged[("kafka_gateway_connections_total", SIDECAR)] == 11
    assert merged[("kafka_gateway_connections_active", ACTIVE)] == 1
