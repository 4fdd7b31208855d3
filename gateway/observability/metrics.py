"""Prometheus metrics of the gateway.

Label values are bounded: api names come from kio's table, api keys and versions are
their own for a known key and a version in 0..127 (else -1), reasons from a fixed set,
client software from KIP-511-validated strings, else the client id made bounded
("client-id:producer"; ``gateway.client_records``), else "unknown", and at most
max_client_software_labels pairs of them ("other" past it); listeners and features from
config. Per-request traffic is not counted through labelled prometheus
objects (a label lookup per request would cost more than the rest of the fast path);
each connection counts into plain dicts (``protocol.ApiStats``) and ``TrafficCollector``
(``observability.traffic_metrics``) folds them into labelled series when scraped, when a
client identifies itself and when a connection closes.

Everything here runs on the event loop thread, including scrapes (``server.http``
serves /metrics from the loop), so no locks are needed.

Several processes (``workers`` > 1): every worker keeps its own registry and serves it
privately; the supervisor's /metrics is their merge (``observability.merge``): counters
and histograms summed, gauges by the rule each one's meaning needs.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

from ..client_records import UNKNOWN, api_labels
from ..protocol import api_name
from .bridge_metrics import BridgeMetrics
from .logging import RateLimitedLogger
from .traffic_metrics import TRAFFIC_LABELS, TrafficCollector

limited = RateLimitedLogger("gateway.metrics")
# The label value of client software past max_client_software_labels.
OTHER = "other"

# Why a frame or connection was refused; the bounded label set of rejected_requests.
REJECT_REASONS = (
    "oversize_frame",
    "malformed_frame",
    "unknown_api_key",
    "unsupported_version",
    "gated_by_feature",
    "invalid_client_software",
    "unauthorized",
    # A request body that does not decode where the gateway must read it (closed), and
    # an interceptor that failed on a request (closed; request.handler_failed).
    "malformed_request",
    "handler_error",
)

# kafka_gateway_rejected_requests_total: why, and what (the request's API and version,
# the client's software or client-id identity) as the traffic counters label it.
REJECTED_LABELS = ("listener", "reason", *TRAFFIC_LABELS[1:])


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # *_created series double every counter in the exposition for a timestamp
        # Prometheus already records itself.
        disable_created_metrics()
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.traffic = TrafficCollector()
        r.register(self.traffic)
        self.bridge = BridgeMetrics(r)
        self.connections_active = Gauge(
            "kafka_gateway_connections_active",
            "Client connections currently open, by listener and client software "
            "(KIP-511's connection count)",
            ["listener", "client_software_name", "client_software_version"],
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
            "Requests or frames the gateway refused, by reason, API key and version "
            "(-1: none or unknown) and client software (or client-id identity)",
            REJECTED_LABELS,
            registry=r,
        )
        # A zero series per reason (listener "none", no request, no client), so each
        # reason has a series from the start: its dashboard panel has data, and the
        # unattributed refusals of a reason count in rate() from the first. (Prometheus
        # drops empty label values: "none", not "", keeps the label set whole.)
        for reason in REJECT_REASONS:
            self.rejected.labels("none", reason, "-1", api_name(-1), "-1", UNKNOWN, UNKNOWN)
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
        self.node_endpoints_dropped = Counter(
            "kafka_gateway_node_endpoints_dropped_total",
            "Streamed responses whose KIP-951 NodeEndpoints were left out because the "
            "gateway addresses did not fit in the bytes already announced (clients then "
            "refresh Metadata)",
            ["api"],
            registry=r,
        )
        self.client_aborts = Counter(
            "kafka_gateway_client_aborts_total",
            "Client connections that closed in the middle of a request frame",
            registry=r,
        )
        # -- edge: SNI routing and unknown API keys --
        self.sni_refused = Counter(
            "kafka_gateway_sni_refused_total",
            "TLS connections to the shared SNI port refused, by reason (no server name, "
            "a name that is neither the bootstrap nor a broker name, a broker not known)",
            ["reason"],
            registry=r,
        )
        for reason in ("missing_server_name", "unknown_server_name", "unknown_broker"):
            self.sni_refused.labels(reason)
        self.unknown_api_keys = Counter(
            "kafka_gateway_unknown_api_keys_total",
            "Requests with an API key the gateway does not know, by what unknown_api_keys "
            "did with them (close the connection or forward untouched)",
            ["action"],
            registry=r,
        )
        for action in ("close", "forward"):
            self.unknown_api_keys.labels(action)
        self.api_version_limit = Gauge(
            "kafka_gateway_api_version_limit",
            "Highest version of an API the gateway decodes (it rewrites or answers it) "
            "that its codec handles: an upstream offering more is capped to it. An API not "
            "listed passes through at every version its upstream offers",
            ["api_key", "api"],
            registry=r,
        )
        # -- feature gating (KIP-584) --
        self.feature_finalized_level = Gauge(
            "kafka_gateway_feature_finalized_level",
            "Finalized level of each feature this gateway enforces (0: not finalized)",
            ["feature"],
            registry=r,
        )
        self.feature_epoch = Gauge(
            "kafka_gateway_feature_finalized_epoch",
            "Epoch of the finalized features this gateway serves (-1: none)",
            registry=r,
        )
        self.feature_epoch.set(-1)
        self.feature_supported_min = Gauge(
            "kafka_gateway_feature_supported_min_level",
            "Lowest level of each feature this gateway supports",
            ["feature"],
            registry=r,
        )
        self.feature_supported_max = Gauge(
            "kafka_gateway_feature_supported_max_level",
            "Highest level of each feature this gateway (catalogue and upstream) supports",
            ["feature"],
            registry=r,
        )
        self.feature_broker_finalized = Gauge(
            "kafka_gateway_feature_broker_finalized_level",
            "Level the upstream broker finalized of each feature the catalogue gates "
            "(ApiVersions v3+); above kafka_gateway_feature_finalized_level: withheld",
            ["feature", "upstream"],
            registry=r,
        )
        self.connections_renegotiated = Counter(
            "kafka_gateway_connections_renegotiated_total",
            "Connections drained (in-flight requests answered, then closed) because a "
            "version they negotiated was withdrawn, so their clients reconnect and "
            "negotiate again, by reason (feature_levels: finalized levels or the catalogue "
            "changed; upstream_api_versions: the connection's broker answered ApiVersions "
            "differently, e.g. a feature downgraded on the brokers)",
            ["reason"],
            registry=r,
        )
        self.connections_renegotiated.labels("feature_levels")
        self.connections_renegotiated.labels("upstream_api_versions")
        self.zookeeper_connected = Gauge(
            "kafka_gateway_zookeeper_connected",
            "1 while the ZooKeeper session is connected (0 also when ZooKeeper is not used)",
            registry=r,
        )
        self.zookeeper_staleness = Gauge(
            "kafka_gateway_zookeeper_staleness_seconds",
            "Seconds the served finalized features have gone unconfirmed by ZooKeeper",
            registry=r,
        )
        self.healthy = Gauge(
            "kafka_gateway_healthy",
            "1 when the gateway can serve the finalized feature levels, else 0",
            registry=r,
        )
        self.healthy.set(1)
        # -- event-loop lag (issue 19) ---------------------------------------------
        # How long a callback that became ready waited for the loop (a probe posted by a
        # thread every 100 ms, gateway/server/loop_lag.py): the time some callback held
        # the loop, or the process waited for a CPU, while every other connection
        # waited. The second histogram is the first part alone. Buckets from 0.05 ms:
        # the target is p99 <= 1 ms.
        lag_buckets = (
            0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0
        )  # fmt: skip
        self.event_loop_lag = Histogram(
            "kafka_gateway_event_loop_lag_seconds",
            "How long a callback that became ready waited for the event loop (a probe "
            "every 100 ms); a stall here delays every connection",
            buckets=lag_buckets,
            registry=r,
        )
        self.event_loop_lag_busy = Histogram(
            "kafka_gateway_event_loop_lag_busy_seconds",
            "Of each kafka_gateway_event_loop_lag_seconds wait, the time the loop's "
            "thread spent running other callbacks (the rest it waited for a CPU)",
            buckets=lag_buckets,
            registry=r,
        )
        # -- end event-loop lag ------------------------------------------------------
        self.info = Gauge(
            "kafka_gateway_info",
            "Constant 1, labelled with this gateway's and its upstream broker's software, "
            "and the Kafka release its protocol data was generated from (protocol_kafka)",
            [
                "gateway_id",
                "gateway_version",
                "broker_software_name",
                "broker_software_version",
                "upstream",
                "protocol_kafka",
            ],
            registry=r,
        )
        self._limit_metrics(r)
        # -- workers (issue 12; see gateway/server/supervisor.py) ----------------------
        # 0 in a single process and in every worker; the supervisor counts. Exported
        # everywhere so /metrics has the same names whatever `workers` is.
        self.worker_restarts = Counter(
            "kafka_gateway_worker_restarts_total",
            "Worker processes the supervisor restarted after they died",
            registry=r,
        )

    # -- connection limits (issue 13; see gateway/server/limits.py) --
    def _limit_metrics(self, r: CollectorRegistry) -> None:
        self.connections_refused = Counter(
            "kafka_gateway_connections_refused_total",
            "Connections closed when accepted, by the limit they were over (creation rate: "
            "those that would have waited longer than their first-request deadline)",
            ["reason"],
            registry=r,
        )
        for reason in ("max_connections", "max_connections_per_ip", "max_connection_creation_rate"):
            self.connections_refused.labels(reason)
        self.connections_limit_closed = Counter(
            "kafka_gateway_connections_closed_total",
            "Connections the gateway closed for a limit: idle (connections_max_idle_ms) or no "
            "complete first request in time (connection_first_request_timeout_ms)",
            ["reason"],
            registry=r,
        )
        for reason in ("idle", "first_request_timeout"):
            self.connections_limit_closed.labels(reason)
        self.connections_throttled = Counter(
            "kafka_gateway_connections_throttled_total",
            "New connections held (not read) until max_connection_creation_rate allowed "
            "them, as Kafka's acceptor throttles",
            registry=r,
        )
        self.reads_paused = Counter(
            "kafka_gateway_client_reads_paused_total",
            "Times a client connection stopped being read because the gateway buffered more "
            "than queued_max_request_bytes",
            registry=r,
        )
        self.config_reloads = Counter(
            "kafka_gateway_config_reloads_total",
            "SIGHUP reloads of the TLS certificates and feature catalogue, by result (a file "
            "that does not load keeps the old one)",
            ["result"],
            registry=r,
        )
        for result in ("ok", "failed"):
            self.config_reloads.labels(result)
        # KIP-511 software pairs with labels of their own (software_labels).
        self.max_software_labels = 1000
        self._software_seen: set[tuple[str, str]] = set()  # "unknown" needs no entry
        self.software_overflow = Counter(
            "kafka_gateway_client_software_labels_overflow_total",
            'Clients identified with a software name/version labelled "other" because '
            "max_client_software_labels distinct pairs were labelled already",
            registry=r,
        )
        self.queued_bytes = Gauge(
            "kafka_gateway_queued_bytes",
            "Bytes buffered in partial requests and undelivered responses, as counted "
            "against queued_max_request_bytes",
            registry=r,
        )

    def software_labels(self, name: str, version: str) -> tuple[str, str]:
        """The labels for a client's KIP-511 software: itself while fewer than
        max_software_labels distinct pairs have been labelled, else ("other", "other").
        Series outlive their connections (counters), so the cap is on pairs ever seen."""
        pair = (name, version)
        if pair in self._software_seen:
            return pair
        if len(self._software_seen) < self.max_software_labels:
            self._software_seen.add(pair)
            return pair
        self.software_overflow.inc()
        limited.warning(
            "metrics.client_software_labels_full",
            limit_key="max_client_software_labels",
            max_client_software_labels=self.max_software_labels,
            client_software_name=name[:64],
            client_software_version=version[:64],
            labelled_as=OTHER,
        )
        return OTHER, OTHER

    def refused(
        self,
        reason: str,
        listener: str,
        info: Any = None,
        api_key: int = -1,
        api_version: int = -1,
    ) -> None:
        """Count one refused request or frame under its reason, API key and version
        (bounded as the traffic counters bound them) and the client's labels; tell its
        identity record (``info``: the connection's ``client_info.ClientInfo``, or None)."""
        key, version = api_labels(api_key, api_version)
        software = info.labels if info is not None else (UNKNOWN, UNKNOWN)
        self.rejected.labels(
            listener, reason, str(key), api_name(key), str(version), *software
        ).inc()
        if info is not None:
            info.refused(api_key, api_version, reason)

    def client_identified(self, listener: str, old: tuple[str, str], new: tuple[str, str]) -> None:
        self.connections_active.labels(listener, *old).dec()
        self.connections_active.labels(listener, *new).inc()

    def set_info(self, **labels: Any) -> None:
        self.info.labels(**labels).set(1)


__all__ = ["REJECTED_LABELS", "REJECT_REASONS", "Metrics", "TrafficCollector"]
