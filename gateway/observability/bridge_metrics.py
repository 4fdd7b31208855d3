"""The version bridge's metrics (``gateway.bridge``): what it carried, for whom, at what
CPU. Labels are bounded: api names from Kafka's table, versions of the removed ranges."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class BridgeMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self.requests = Counter(
            "kafka_gateway_bridged_requests_total",
            "Requests at a version the upstream removed, converted up by the version bridge",
            ["api", "from_version", "to_version"],
            registry=r,
        )
        self.connections = Gauge(
            "kafka_gateway_bridged_connections",
            "Open client connections that have had a request bridged",
            registry=r,
        )
        self.cpu = Counter(
            "kafka_gateway_bridge_cpu_seconds_total",
            "CPU the version bridge spent converting requests and answers",
            registry=r,
        )
        self.headers_dropped = Counter(
            "kafka_gateway_bridge_headers_dropped_total",
            "Record headers left out of message sets for Fetch v0-3 clients (magic 0/1 have none)",
            registry=r,
        )
        self.capped = Counter(
            "kafka_gateway_bridge_capped_answers_total",
            "ApiVersions answers told no version above a [bridge] policy cap",
            registry=r,
        )
