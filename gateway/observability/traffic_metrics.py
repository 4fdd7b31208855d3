"""The per-request traffic series: requests, responses, latency and bytes, folded from
each connection's plain counts (``protocol.ApiStats``) when scraped, when a client
identifies itself and when a connection closes, never per request (a labelled
prometheus object per request would cost more than the rest of the fast path). Part of
the gateway's metrics (``observability.metrics``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ..client_records import api_labels
from ..protocol import LATENCY_BUCKETS, ApiStats, api_name

TRAFFIC_LABELS = (
    "listener",
    "api_key",
    "api",
    "api_version",
    "client_software_name",
    "client_software_version",
)
# (listener, client software name, client software version)
Who = tuple[str, str, str]


class TrafficCollector(Collector):
    """requests_total, responses_total, request_latency_seconds and client byte counters."""

    def __init__(self, refresh: Callable[[], None] | None = None) -> None:
        self.refresh = refresh  # folds live connections before a scrape
        self.requests: dict[tuple[str, str, str, int, int], int] = {}
        self.responses: dict[tuple[str, str, str, int, int], int] = {}
        self.latency: dict[int, list[float]] = {}
        self.bytes_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}

    def fold(self, who: Who, stats: ApiStats, bytes_in: int, bytes_out: int) -> None:
        """Add one connection's counts (already taken from it) under its labels."""
        for target, source in ((self.requests, stats.requests), (self.responses, stats.responses)):
            for (key, version), count in source.items():
                # Keys the gateway does not know and absurd versions (garbage, fuzzing)
                # share one series, -1/-1: counted per value they would grow the label
                # set without bound (bench/fuzz_gateway.py saw RSS creep from exactly
                # that). A known key keeps a version no schema has (Produce v2, which
                # Kafka 4 removed): that is who an upgrade breaks.
                label = (*who, *api_labels(key, version))
                target[label] = target.get(label, 0) + count
        for key, histogram in stats.latency.items():
            mine = self.latency.get(key)
            if mine is None:
                self.latency[key] = list(histogram)
            else:
                for i, value in enumerate(histogram):
                    mine[i] += value
        listener = who[0]
        if bytes_in:
            self.bytes_in[listener] = self.bytes_in.get(listener, 0) + bytes_in
        if bytes_out:
            self.bytes_out[listener] = self.bytes_out.get(listener, 0) + bytes_out

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        if self.refresh is not None:
            self.refresh()
        return list(self._families())

    def _families(self) -> Iterator[Metric]:
        for name, doc, data in (
            ("kafka_gateway_requests", "Requests received from clients", self.requests),
            (
                "kafka_gateway_responses",
                "Responses sent to clients (from the upstream or the gateway)",
                self.responses,
            ),
        ):
            family = CounterMetricFamily(name, doc, labels=TRAFFIC_LABELS)
            for (listener, sw_name, sw_version, key, version), count in sorted(data.items()):
                family.add_metric(
                    [listener, str(key), api_name(key), str(version), sw_name, sw_version],
                    count,
                )
            yield family
        histogram = HistogramMetricFamily(
            "kafka_gateway_request_latency_seconds",
            "Time from a request's arrival to its response going out to the client",
            labels=["api"],
        )
        for key, values in sorted(self.latency.items()):
            cumulative = 0.0
            buckets = []
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), values[1:], strict=True):
                cumulative += count
                buckets.append((_bound(bound), cumulative))
            histogram.add_metric([api_name(key)], buckets, values[0])
        yield histogram
        for name, doc, data in (
            ("kafka_gateway_client_received_bytes", "Bytes received from clients", self.bytes_in),
            ("kafka_gateway_client_sent_bytes", "Bytes sent to clients", self.bytes_out),
        ):
            family = CounterMetricFamily(name, doc, labels=["listener"])
            for listener, count in sorted(data.items()):
                family.add_metric([listener], count)
            yield family


def _bound(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(value)


__all__ = ["TRAFFIC_LABELS", "TrafficCollector", "Who"]
