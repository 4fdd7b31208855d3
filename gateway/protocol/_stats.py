"""Per-connection request/response counts and latencies (plain counting, no I/O).

The in-flight table sees every request and every response of a connection, so it is
where traffic is counted; the observability layer folds these counts into Prometheus
series labelled with the connection's listener and client software (see
``observability.metrics.TrafficCollector``). Keeping raw dicts here costs a dict update
per request on the hot path instead of a labelled-metric lookup.
"""

from __future__ import annotations

from bisect import bisect_left

# Upper bounds (seconds) of the latency histogram buckets: sub-millisecond metadata
# calls up to fetches that long-poll for their max wait.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class ApiStats:
    """Counts since the last ``take``: requests and responses by (api_key, api_version),
    and per api_key a latency histogram ``[sum, count_b0, ..., count_b14(+Inf)]``."""

    __slots__ = ("latency", "requests", "responses")

    def __init__(self) -> None:
        self.requests: dict[tuple[int, int], int] = {}
        self.responses: dict[tuple[int, int], int] = {}
        self.latency: dict[int, list[float]] = {}

    def count_request(self, key: int, version: int) -> None:
        requests = self.requests
        requests[(key, version)] = requests.get((key, version), 0) + 1

    def count_response(self, key: int, version: int, elapsed: float) -> None:
        responses = self.responses
        responses[(key, version)] = responses.get((key, version), 0) + 1
        histogram = self.latency.get(key)
        if histogram is None:
            histogram = self.latency[key] = [0.0] * (len(LATENCY_BUCKETS) + 2)
        histogram[0] += elapsed
        histogram[1 + bisect_left(LATENCY_BUCKETS, elapsed)] += 1

    def merge(self, other: ApiStats) -> None:
        """Add ``other``'s counts to these."""
        for key, count in other.requests.items():
            self.requests[key] = self.requests.get(key, 0) + count
        for key, count in other.responses.items():
            self.responses[key] = self.responses.get(key, 0) + count
        for api_key, histogram in other.latency.items():
            mine = self.latency.get(api_key)
            if mine is None:
                self.latency[api_key] = list(histogram)
            else:
                for i, value in enumerate(histogram):
                    mine[i] += value

    def take(self) -> ApiStats:
        """Hand over the counts gathered so far and start from zero."""
        taken = ApiStats()
        taken.requests, self.requests = self.requests, taken.requests
        taken.responses, self.responses = self.responses, taken.responses
        taken.latency, self.latency = self.latency, taken.latency
        return taken
