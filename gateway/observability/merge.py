"""One Prometheus exposition out of several worker processes' (sans-I/O).

A supervised gateway (``workers`` > 1) must look like one gateway from outside: the
same metric names and labels as a single process, whatever the worker count. Each
worker keeps its own registry; the supervisor parses their expositions and merges
them here: counters and histograms are summed, and each gauge by what it means (open
connections add up; a feature epoch is the oldest one any worker serves).

prometheus-client's multiprocess mode was the other way: it cannot carry the
gateway's custom collector (per-connection traffic counters folded at scrape time),
and it keeps a file per process and metric on disk. Parsing the text expositions
needs nothing but the library's own parser.

A worker that dies leaves its last counter values behind (``retire``), so the sums
never go backwards: Prometheus would read a smaller sum as a counter reset and count
the surviving workers' totals as new increases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

# (sample name, labels in exposition order)
SampleKey = tuple[str, tuple[tuple[str, str], ...]]


class Family:
    __slots__ = ("documentation", "name", "samples", "type")

    def __init__(self, name: str, documentation: str, type_: str) -> None:
        self.name = name
        self.documentation = documentation
        self.type = type_
        self.samples: dict[SampleKey, float] = {}


Parsed = dict[str, Family]

# How a gauge of several workers becomes one value. Not listed: max (values every
# worker holds alike: supported levels, finalized levels, the info series).
GAUGE_RULES: dict[str, Callable[[Iterable[float]], float]] = {
    # Amounts that add up over processes.
    "kafka_gateway_connections_active": sum,
    "kafka_gateway_queued_bytes": sum,
    "kafka_gateway_bridged_connections": sum,
    # The gateway is as far behind / as unwell as its worst worker: a worker still on
    # an older epoch shows as that epoch, so KafkaGatewayEpochDivergence sees it.
    "kafka_gateway_feature_finalized_epoch": min,
    "kafka_gateway_healthy": min,
    "kafka_gateway_zookeeper_connected": min,
    "kafka_gateway_zookeeper_staleness_seconds": max,
}
SUMMED_TYPES = frozenset({"counter", "histogram", "summary", "unknown"})


def parse(text: str) -> Parsed:
    out: Parsed = {}
    for metric in text_string_to_metric_families(text):
        family = Family(metric.name, metric.documentation, metric.type)
        for sample in metric.samples:
            if sample.name.endswith("_created"):
                continue  # per-process creation times do not merge
            family.samples[(sample.name, tuple(sample.labels.items()))] = sample.value
        out[metric.name] = family
    return out


class MetricsMerger:
    def __init__(self) -> None:
        # Counters and histograms of workers that died, kept in every later merge.
        self.retired: Parsed = {}

    def retire(self, last: Parsed | None) -> None:
        """A worker died: keep what its counters had reached when last read."""
        if last:
            self.retired = _combine([self.retired, last], only_summed=True)

    def merge(self, workers: Sequence[Parsed]) -> list[Metric]:
        combined = _combine([self.retired, *workers], only_summed=False)
        out = []
        for family in combined.values():
            metric = Metric(family.name, family.documentation, family.type)
            for (name, labels), value in family.samples.items():
                metric.add_sample(name, dict(labels), value)
            out.append(metric)
        return out


def _combine(parts: Sequence[Parsed], *, only_summed: bool) -> Parsed:
    out: Parsed = {}
    gauges: dict[str, dict[SampleKey, list[float]]] = {}
    for part in parts:
        for name, family in part.items():
            summed = family.type in SUMMED_TYPES
            if only_summed and not summed:
                continue
            mine = out.get(name)
            if mine is None:
                mine = out[name] = Family(name, family.documentation, family.type)
            if summed:
                for key, value in family.samples.items():
                    mine.samples[key] = mine.samples.get(key, 0.0) + value
            else:
                values = gauges.setdefault(name, {})
                for key, value in family.samples.items():
                    values.setdefault(key, []).append(value)
    for name, values in gauges.items():
        rule = GAUGE_RULES.get(name, max)
        out[name].samples = {key: float(rule(vs)) for key, vs in values.items()}
    return out
