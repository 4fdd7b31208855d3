"""Build the kafka-gateway Grafana dashboard (dashboards/kafka-gateway.json).

    .venv/bin/python deploy/grafana/build_dashboard.py           # rewrite the JSON
    .venv/bin/python deploy/grafana/build_dashboard.py --check   # exit 1 if out of date

Written with grafana-foundation-sdk, Grafana's own typed builders, instead of by hand:
the JSON is generated, and tests/unit/project/test_dashboard.py checks that the committed file is
what this script generates. tests/integration/test_dashboard.py runs every query against
a real Prometheus scraping real gateways.

Every query filters on the ``kafka_cluster`` and ``instance`` variables (the scrape
configs in deploy/ set ``kafka_cluster``; the alerts group by it) and aggregates across a
gateway's workers, which /metrics already sums.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

OUTPUT = Path(__file__).resolve().parent / "dashboards" / "kafka-gateway.json"
# From the repository root, with the project's virtualenv (it has the SDK: test extra).
REGENERATE = ".venv/bin/python deploy/grafana/build_dashboard.py"
UID = "kafka-gateway"
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
# The gateways the variables select; every panel query but the epoch divergence uses it.
SELECTED = 'kafka_cluster=~"$kafka_cluster", instance=~"$instance"'
# Issue 12's metric: a worker process the gateway restarted. Until a gateway exports it,
# the panel reads "No data" (tests/integration/test_dashboard.py expects exactly that).
WORKER_RESTARTS = "kafka_gateway_worker_restarts_total"
# The alerts of deploy/prometheus/alerts.yml while they fire, marked on every graph (by
# cluster only: the epoch divergence alert has no instance).
ALERTS_FIRING = (
    'ALERTS{alertstate="firing", alertname=~"KafkaGateway.+", kafka_cluster=~"$kafka_cluster"}'
)


def query(
    expr: str, legend: str = "", *, ref: str = "A", instant: bool = False
) -> prometheus.Dataquery:
    """One target; ``ref`` is its refId (A, B, ... in a panel, as Grafana's editor names them)."""
    q = prometheus.Dataquery().ref_id(ref).expr(expr).datasource(DATASOURCE)
    if legend:
        q = q.legend_format(legend)
    if instant:
        q = q.instant().format(PromQueryFormat.TABLE)
    return q


def rate(metric: str, by: str, selector: str = SELECTED) -> str:
    return f"sum by ({by}) (rate({metric}{{{selector}}}[$__rate_interval]))"


def p99(histogram: str) -> str:
    """The 99th percentile per gateway of a histogram (summed over its workers)."""
    return f"histogram_quantile(0.99, {rate(f'{histogram}_bucket', 'le, instance')})"


def series(title: str, description: str, unit: str) -> timeseries.Panel:
    return (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .fill_opacity(10)
        .span(12)
        .height(8)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )


def status(title: str, description: str, colors: dash.ThresholdsConfig) -> stat.Panel:
    """A stat panel whose background takes the threshold colour of the latest value."""
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .height(8)
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.NONE)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
        .thresholds(colors)
    )


def thresholds(*steps: tuple[float | None, str]) -> dash.ThresholdsConfig:
    return (
        dash.ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps([model.Threshold(value=v, color=c) for v, c in steps])
    )


def traffic() -> list[timeseries.Panel]:
    latency = series(
        "Request latency quantiles",
        "From a request's arrival to its response going out to the client, by API.",
        "s",
    )
    buckets = rate("kafka_gateway_request_latency_seconds_bucket", "le, api")
    for ref, quantile in zip("ABC", (0.5, 0.95, 0.99), strict=True):
        latency = latency.with_target(
            query(
                f"histogram_quantile({quantile}, {buckets})",
                f"p{quantile * 100:g} {{{{api}}}}",
                ref=ref,
            )
        )
    return [
        series(
            "Requests by API and version",
            "Requests received from clients per second, by Kafka API and request version.",
            "reqps",
        ).with_target(
            query(
                rate("kafka_gateway_requests_total", "api, api_version"), "{{api}} v{{api_version}}"
            )
        ),
        latency,
        series(
            "Client bytes",
            "Bytes received from and sent to clients per second, per gateway.",
            "Bps",
        )
        .with_target(
            query(rate("kafka_gateway_client_received_bytes_total", "instance"), "{{instance}} in")
        )
        .with_target(
            query(
                rate("kafka_gateway_client_sent_bytes_total", "instance"),
                "{{instance}} out",
                ref="B",
            )
        ),
    ]


# Counters of things that went wrong besides rejections, one line per kind. The labelled
# ones exist only once something happened; the unlabelled ones always do, so the panel
# shows zeros rather than "No data" on a healthy fleet.
ERROR_KINDS = {
    "upstream_connect": "kafka_gateway_upstream_connect_errors_total",
    "rewrite": "kafka_gateway_rewrite_errors_total",
    "node_endpoints_dropped": "kafka_gateway_node_endpoints_dropped_total",
    "dropped_response": "kafka_gateway_dropped_responses_total",
    "client_abort": "kafka_gateway_client_aborts_total",
}


def errors() -> list[timeseries.Panel]:
    kinds = " or ".join(
        f'label_replace(rate({metric}{{{SELECTED}}}[$__rate_interval]), "kind", "{kind}", "", "")'
        for kind, metric in ERROR_KINDS.items()
    )
    return [
        series(
            "Rejected requests by reason",
            "Requests or frames the gateway refused. gated_by_feature: a version withheld "
            "until a feature level is finalized (KafkaGatewayRejectedRequestsSpike).",
            "reqps",
        ).with_target(query(rate("kafka_gateway_rejected_requests_total", "reason"), "{{reason}}")),
        series(
            "Errors by kind",
            "upstream_connect: the broker could not be reached; rewrite: a response "
            "forwarded without address rewriting; node_endpoints_dropped: KIP-951 endpoints "
            "left out; dropped_response: an answer nobody awaited (acks=0); client_abort: "
            "a client closed mid-request.",
            "ops",
        ).with_target(query(f"sum by (kind) ({kinds})", "{{kind}}")),
    ]


def clients_and_brokers() -> list[object]:
    software = "client_software_name, client_software_version"
    return [
        series(
            "Connections by client software (KIP-511)",
            "Open client connections by the ClientSoftwareName/Version clients announce "
            "in ApiVersions (unknown: an old client or none announced).",
            "short",
        ).with_target(
            query(
                f"sum by ({software}) (kafka_gateway_connections_active{{{SELECTED}}})",
                "{{client_software_name}} {{client_software_version}}",
            )
        ),
        series(
            "Requests by client software (KIP-511)",
            "Which client software sends the traffic, per second.",
            "reqps",
        ).with_target(
            query(
                rate("kafka_gateway_requests_total", software),
                "{{client_software_name}} {{client_software_version}}",
            )
        ),
        table.Panel()
        .title("Broker software per gateway (KIP-885)")
        .description(
            "The software of each gateway's upstream broker (configured or fingerprinted "
            "from its ApiVersions), and the gateway's own version."
        )
        .datasource(DATASOURCE)
        .span(24)
        .height(6)
        .show_header(True)
        .with_target(
            query(
                "max by (instance, gateway_id, gateway_version, upstream, "
                "broker_software_name, broker_software_version) "
                f"(kafka_gateway_info{{{SELECTED}}})",
                instant=True,
            )
        )
        .with_transformation(
            model.DataTransformerConfig(
                id_val="organize", options={"excludeByName": {"Time": True, "Value": True}}
            )
        ),
    ]


def features() -> list[object]:
    epoch = "kafka_gateway_feature_finalized_epoch"
    per_cluster = 'kafka_cluster=~"$kafka_cluster"'
    return [
        status(
            "Feature epoch divergence",
            "Highest minus lowest finalized epoch among a cluster's gateways (all of them, "
            "whatever the instance filter). Above 0 the gateways gate requests differently: "
            "the lagging ones have probably lost ZooKeeper (KafkaGatewayFeatureEpochDivergence).",
            thresholds((None, "green"), (1, "red")),
        )
        .span(6)
        .with_target(
            query(
                f"max by (kafka_cluster) ({epoch}{{{per_cluster}}})"
                f" - min by (kafka_cluster) ({epoch}{{{per_cluster}}})",
                "{{kafka_cluster}}",
            )
        ),
        series(
            "Finalized feature epoch per gateway",
            "The epoch (ZooKeeper data version of the feature znode) each gateway serves; "
            "-1: nothing finalized. All lines of a cluster should coincide.",
            "none",
        )
        .span(9)
        .with_target(query(f"max by (instance) ({epoch}{{{SELECTED}}})", "{{instance}}")),
        table.Panel()
        .title("Finalized feature levels per gateway")
        .description("The level of each feature every gateway enforces (0: not finalized).")
        .datasource(DATASOURCE)
        .span(9)
        .height(8)
        .show_header(True)
        .with_target(
            query(
                f"max by (instance, feature) (kafka_gateway_feature_finalized_level{{{SELECTED}}})",
                instant=True,
            )
        )
        .with_transformation(
            model.DataTransformerConfig(
                id_val="groupingToMatrix",
                options={"columnField": "feature", "rowField": "instance", "valueField": "Value"},
            )
        ),
    ]


def zookeeper_and_workers() -> list[object]:
    return [
        series(
            "ZooKeeper staleness",
            "Seconds the served feature levels have gone unconfirmed by ZooKeeper "
            "(KafkaGatewayFeatureLevelsStale above 300).",
            "s",
        )
        .span(8)
        .thresholds(thresholds((None, "green"), (300, "red")))
        .thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(common.GraphTresholdsStyleMode.LINE)
        )
        .with_target(
            query(
                f"max by (instance) (kafka_gateway_zookeeper_staleness_seconds{{{SELECTED}}})",
                "{{instance}}",
            )
        ),
        status(
            "Gateway status",
            "Per gateway: scraped (up), ZooKeeper session connected, healthy (can serve the "
            "finalized levels). 0 is red.",
            thresholds((None, "red"), (1, "green")),
        )
        .span(8)
        .with_target(
            query(f'min by (instance) (up{{job="kafka-gateway", {SELECTED}}})', "{{instance}} up")
        )
        .with_target(
            query(
                f"min by (instance) (kafka_gateway_zookeeper_connected{{{SELECTED}}})",
                "{{instance}} zookeeper",
                ref="B",
            )
        )
        .with_target(
            query(
                f"min by (instance) (kafka_gateway_healthy{{{SELECTED}}})",
                "{{instance}} healthy",
                ref="C",
            )
        ),
        series(
            "Worker restarts",
            "Worker processes the gateway restarted after they died (their clients "
            "reconnect; the other workers keep serving).",
            "short",
        )
        .span(8)
        .with_target(
            query(
                f"sum by (instance) (increase({WORKER_RESTARTS}{{{SELECTED}}}[$__rate_interval]))",
                "{{instance}}",
            )
        ),
        series(
            "Event-loop lag p99",
            "How long a callback that became ready waited for a worker's event loop: every "
            "connection of that worker waited as long. 'running callbacks' is the part the "
            "loop spent working (a large response, many busy connections at once); the rest "
            "is the process waiting for a CPU (a busy node, a CPU limit). Above 1 ms is slow.",
            "s",
        )
        .span(24)
        .thresholds(thresholds((None, "green"), (0.001, "orange")))
        .thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(common.GraphTresholdsStyleMode.LINE)
        )
        .with_target(query(p99("kafka_gateway_event_loop_lag_seconds"), "{{instance}} waited"))
        .with_target(
            query(
                p99("kafka_gateway_event_loop_lag_busy_seconds"),
                "{{instance}} running callbacks",
                ref="B",
            )
        ),
    ]


def next_release() -> list[object]:
    software = "client_software_name, client_software_version"
    return [
        series(
            "Requests the next Kafka release refuses",
            "Requests below the minimum version of the release the gateways' "
            "upgrade_target_release declares (Kafka 4.0: those older than Kafka 2.1, KIP-896), "
            "by client: they break when the brokers roll (KafkaGatewayRequestsBelowTargetRelease). "
            "/clients names their client ids and addresses; featurectl plan --release the fix.",
            "reqps",
        ).with_target(
            query(
                rate(
                    "kafka_gateway_requests_below_target_release_total",
                    f"release, api, api_version, {software}",
                ),
                "{{client_software_name}} {{client_software_version}}: {{api}} v{{api_version}} "
                "(Kafka {{release}})",
            )
        )
    ]


def variable(name: str, label: str, definition: str) -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(definition)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .current(model.VariableOption(selected=True, text="All", value="$__all"))
    )


def build() -> dash.Dashboard:
    board = (
        dash.Dashboard("Kafka gateway")
        .uid(UID)
        .description(
            "Traffic, rejections, client and broker software, feature levels and ZooKeeper "
            "state of kafka-gateway (generated by deploy/grafana/build_dashboard.py)."
        )
        .tags(["kafka", "kafka-gateway"])
        .editable()
        .refresh("30s")
        .time("now-1h", "now")
        .timezone(common.TimeZoneBrowser)
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .annotation(
            dash.AnnotationQuery()
            .name("kafka-gateway alerts")
            .datasource(DATASOURCE)
            .enable(True)
            .icon_color("red")
            .expr(ALERTS_FIRING)
        )
        .with_variable(
            dash.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
        .with_variable(
            variable(
                "kafka_cluster", "Kafka cluster", "label_values(kafka_gateway_info, kafka_cluster)"
            )
        )
        .with_variable(
            variable(
                "instance",
                "Gateway",
                'label_values(kafka_gateway_info{kafka_cluster=~"$kafka_cluster"}, instance)',
            )
        )
    )
    panel_id = 0
    for title, panels in (
        ("Traffic", traffic()),
        ("Errors and rejections", errors()),
        ("Clients and brokers", clients_and_brokers()),
        ("Feature levels (KIP-584)", features()),
        ("ZooKeeper and workers", zookeeper_and_workers()),
        # Last: a row added later keeps the earlier panels' ids.
        ("Next Kafka release", next_release()),
    ):
        # Explicit, stable panel ids: links to a panel (?viewPanel=N) keep working.
        panel_id += 1
        board = board.with_row(dash.Row(title).id(panel_id))
        for panel in panels:
            panel_id += 1
            board = board.with_panel(panel.id(panel_id))  # type: ignore[attr-defined]
    return board


def render() -> str:
    """The dashboard as the JSON committed in dashboards/ (sorted keys, 2-space indent)."""
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the JSON is stale")
    args = parser.parse_args(argv)
    text = render()
    json.loads(text)  # fail here, not in Grafana, if the encoder ever emits non-JSON
    if args.check:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is stale: run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
