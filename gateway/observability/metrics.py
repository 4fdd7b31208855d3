"""Prometheus metrics of the gateway.

Label values are bounded: api names come from kio's table, reasons from a fixed set.
Hot-path counters are bound to their label values once (see ``Metrics``) so a request
costs an increment, not a label lookup.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

# Why a frame or connection was refused; the bounded label set of rejected_requests.
REJECT_REASONS = (
    "oversize_frame",
    "malformed_frame",
    "unknown_api_key",
    "unsupported_version",
    "gated_by_feature",
    "invalid_client_software",
)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.connections_active = Gauge(
            "kafka_gateway_connections_active",
            "Client connections currently open",
            ["listener"],
            registry=r,
        )
        self.connections_total = Counter(
            "kafka_gateway_connections_total",
            "Client connections accepted",
            ["listener"],
            registry=r,
        )
        self.rejected = Counter(
            "kafka_gateway_rejected_requests_total",
            "Requests or frames the gateway refused, by reason",
            ["reason"],
            registry=r,
        )
        for reason in REJECT_REASONS:
            self.rejected.labels(reason)
        self.dropped_responses = Counter(
            "kafka_gateway_dropped_responses_total",
            "Upstream responses whose correlation id no request awaited (e.g. answers to "
            "acks=0 produce requests), dropped instead of reaching the client",
            registry=r,
        )
        self.upstream_connect_errors = Counter(
            "kafka_gateway_upstream_connect_errors_total",
            "Failed attempts to connect to an upstream broker",
            ["upstream"],
            registry=r,
        )
        self.rewrite_errors = Counter(
            "kafka_gateway_rewrite_errors_total",
            "Responses that could not be decoded for address rewriting and were forwarded "
            "as they came",
            ["api"],
            registry=r,
        )
        self.client_aborts = Counter(
            "kafka_gateway_client_aborts_total",
            "Client connections that closed in the middle of a request frame",
            registry=r,
        )

    def serve(self, host: str, port: int) -> None:
        start_http_server(port, addr=host, registry=self.registry)
