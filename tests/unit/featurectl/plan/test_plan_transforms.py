"""The planner's DataFrame transformations on small frames built here (one local Spark).

Each test states a situation an operator meets (a restarted gateway, a client that
stopped using an API version, a gateway behind an old broker) and pins the verdict.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from featurectl.plan import decide, tally
from featurectl.plan import exposition as ex
from featurectl.plan import transforms as tx
from featurectl.plan.session import SESSION_CONF
from gateway.features.catalogue import load_catalogue

T0 = datetime(2025, 1, 6, tzinfo=UTC)
INTERVAL_S = 15


def at(n: int) -> datetime:
    """The time of scrape ``n`` (every 15 s from T0)."""
    return T0 + timedelta(seconds=n * INTERVAL_S)


def local(n: int) -> datetime:
    """Scrape ``n`` as PySpark hands timestamps back: naive, in this machine's zone."""
    return datetime.fromtimestamp(at(n).timestamp())


def ms(n: int) -> int:
    return int(at(n).timestamp() * 1000)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[1] session for the whole test session (Spark starts in seconds, once)."""
    builder = SparkSession.builder.master("local[1]").appName("test-plan-transforms")
    settings = {
        **SESSION_CONF,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "1",
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def label_text(**labels: str) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def request_labels(
    api_key: int, version: int, client: str = "librdkafka", client_version: str = "2.6.1"
) -> str:
    return label_text(
        listener="plain",
        api_key=str(api_key),
        api=f"Api{api_key}",
        api_version=str(version),
        client_software_name=client,
        client_software_version=client_version,
    )


SAMPLES_SCHEMA = "ts timestamp, gateway_id string, metric string, label_text string, value double"


def keyed(spark: SparkSession, rows: Sequence[tuple[int, str, str, str, float]]) -> DataFrame:
    """Keyed samples from (scrape n, gateway, metric, label text, value)."""
    frame = spark.createDataFrame(
        [(at(n), gw, metric, text, float(v)) for n, gw, metric, text, v in rows], SAMPLES_SCHEMA
    )
    return tx.key_samples(frame)


def rows(frame: DataFrame, *order: str) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in frame.orderBy(*order).collect()]


def increases_of(spark: SparkSession, samples: list[tuple[int, str, str, str, float]]) -> list:
    frame = keyed(spark, samples)
    spans = tx.gateway_spans(frame)
    return [r["increase"] for r in rows(tx.counter_increases(frame, spans), "gateway_id", "ts")]


# -- parsing ------------------------------------------------------------------------------


def parse(spark: SparkSession, *lines: str) -> list[dict[str, Any]]:
    frame = spark.createDataFrame([("r/gw", line) for line in lines], "source string, line string")
    return rows(ex.parse_exposition(frame), "metric", "value")


def test_parse_reads_labels_value_and_optional_timestamp(spark: SparkSession) -> None:
    got = parse(
        spark,
        "# HELP kafka_gateway_requests_total Requests received from clients",
        "# TYPE kafka_gateway_requests_total counter",
        'kafka_gateway_requests_total{listener="plain",api_key="68",api_version="0"} 12.0',
        "kafka_gateway_feature_finalized_epoch 3",
        "",
        'kafka_gateway_connections_active{listener="tls"} 4 1736121600000',
    )
    assert got == [
        {
            "source": "r/gw",
            "metric": "kafka_gateway_connections_active",
            "labels": {"listener": "tls"},
            "value": 4.0,
            "line_ts_ms": 1736121600000,
        },
        {
            "source": "r/gw",
            "metric": "kafka_gateway_feature_finalized_epoch",
            "labels": {},
            "value": 3.0,
            "line_ts_ms": None,
        },
        {
            "source": "r/gw",
            "metric": "kafka_gateway_requests_total",
            "labels": {"listener": "plain", "api_key": "68", "api_version": "0"},
            "value": 12.0,
            "line_ts_ms": None,
        },
    ]


def test_parse_undoes_escapes_and_keeps_braces_and_commas_in_values(spark: SparkSession) -> None:
    got = parse(
        spark,
        r'm{a="say \"hi\"",b="back\\slash",c="two\nlines"} 1',
        'm{a="x}y",b="1,2", c="spaced"} 2',
        'm{a="trailing",} 3',
    )
    assert [g["labels"] for g in got] == [
        {"a": 'say "hi"', "b": "back\\slash", "c": "two\nlines"},
        {"a": "x}y", "b": "1,2", "c": "spaced"},
        {"a": "trailing"},
    ]


def test_parse_reads_special_values_and_drops_broken_lines(spark: SparkSession) -> None:
    got = parse(
        spark,
        'le{le="+Inf"} +Inf',
        "nan NaN",
        'broken{a="x" 1',
        "no_value",
        "not_a_number abc",
        "  padded 5  ",
    )
    values = {g["metric"]: g["value"] for g in got}
    assert set(values) == {"le", "nan", "padded"}
    assert values["le"] == float("inf") and values["padded"] == 5.0
    assert values["nan"] != values["nan"]  # NaN


def test_parse_agrees_with_prometheus_client_on_a_real_scrape(spark: SparkSession) -> None:
    from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    requests = Counter(
        "kafka_gateway_requests", "r", ["api", "client_software_name"], registry=registry
    )
    requests.labels("Produce", "librdkafka").inc(7)
    requests.labels('we"ird\\', "x\ny").inc(2)
    Gauge("kafka_gateway_healthy", "h", registry=registry).set(1)
    text = generate_latest(registry).decode()
    expected = sorted(
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    )
    got = sorted(
        (g["metric"], tuple(sorted(g["labels"].items())), g["value"])
        for g in parse(spark, *text.splitlines())
    )
    assert got == expected


def test_scrape_key_is_round_and_file_stem_of_any_uri(spark: SparkSession) -> None:
    frame = spark.createDataFrame(
        [("file:///data/m/scrapes/20250106T000000.000Z/gw-1.example~3A9092.prom",)], "path string"
    )
    assert frame.select(ex.scrape_key(F.col("path"))).first()[0] == (
        "20250106T000000.000Z/gw-1.example~3A9092"
    )


def test_attach_scrapes_prefers_the_lines_own_timestamp(spark: SparkSession) -> None:
    lines = spark.createDataFrame(
        [("r1/a", "m 1"), ("r1/a", f"m 2 {ms(5)}"), ("orphan/x", "m 3")],
        "source string, line string",
    )
    scrapes = spark.createDataFrame(
        [("r1/a", "gw-a", ms(1))], "source string, gateway_id string, scrape_time_ms long"
    )
    got = rows(ex.attach_scrapes(ex.parse_exposition(lines), scrapes), "value")
    assert [(g["gateway_id"], g["ts"], g["value"]) for g in got] == [
        ("gw-a", local(1), 1.0),
        ("gw-a", local(5), 2.0),
    ]


def test_label_sets_parse_each_distinct_label_text_once(spark: SparkSession) -> None:
    frame = keyed(
        spark,
        [
            (0, "gw", tx.REQUESTS, request_labels(68, 0), 1),
            (1, "gw", tx.REQUESTS, request_labels(68, 0), 2),
            (1, "gw", tx.CONNECTIONS, label_text(listener="plain"), 3),
        ],
    )
    sets = rows(tx.label_sets(frame), "api_key")
    assert len(sets) == 2
    assert sets[1]["api_key"] == 68 and sets[1]["client_software_version"] == "2.6.1"
    small = rows(tx.labelled(frame, tx.label_sets(frame), [tx.CONNECTIONS]), "ts")
    assert [(s["metric"], s["listener"], s["value"]) for s in small] == [
        (tx.CONNECTIONS, "plain", 3.0)
    ]


# -- counters -----------------------------------------------------------------------------


def test_a_series_present_at_the_first_scrape_counts_from_there(spark: SparkSession) -> None:
    text = request_labels(0, 9)
    assert increases_of(
        spark,
        [
            (0, "gw", tx.REQUESTS, text, 100),
            (1, "gw", tx.REQUESTS, text, 130),
            (2, "gw", tx.REQUESTS, text, 130),
        ],
    ) == [0.0, 30.0, 0.0]


def test_a_counter_reset_counts_the_new_value_as_increase(spark: SparkSession) -> None:
    text = request_labels(0, 9)
    samples = [(n, "gw", tx.REQUESTS, text, v) for n, v in enumerate([10, 20, 5, 9])]
    assert increases_of(spark, samples) == [0.0, 10.0, 5.0, 4.0]


def test_a_series_born_after_the_first_scrape_counts_in_full(spark: SparkSession) -> None:
    old, new = request_labels(0, 9), request_labels(68, 0)
    samples = [
        (0, "gw", tx.REQUESTS, old, 1),
        (1, "gw", tx.REQUESTS, old, 1),
        (1, "gw", tx.REQUESTS, new, 7),
        (2, "gw", tx.REQUESTS, new, 9),
    ]
    frame = keyed(spark, samples)
    got = rows(tx.counter_increases(frame, tx.gateway_spans(frame)), "ts", "value")
    assert [(g["value"], g["increase"]) for g in got] == [(1, 0), (1, 0), (7, 7), (9, 2)]


def test_a_gateway_scraped_once_counts_its_totals(spark: SparkSession) -> None:
    samples = [(0, "gw", tx.REQUESTS, request_labels(68, 0), 42)]
    assert increases_of(spark, samples) == [42.0]


def test_first_and_last_seen_per_client_and_version(spark: SparkSession) -> None:
    java = request_labels(69, 0, "apache-kafka-java", "3.7.0")
    idle = request_labels(69, 0, "apache-kafka-java", "3.6.0")
    late = request_labels(69, 0, "librdkafka", "2.6.1")
    samples = [
        *((n, "gw-a", tx.REQUESTS, java, v) for n, v in enumerate([5, 8, 8, 8])),
        *((n, "gw-b", tx.REQUESTS, java, v) for n, v in enumerate([0, 0, 1, 1])),
        *((n, "gw-a", tx.REQUESTS, idle, v) for n, v in enumerate([3, 3, 3, 3])),
        *((n, "gw-a", tx.REQUESTS, late, v) for n, v in [(0, 0), (1, 0), (2, 0), (3, 4)]),
    ]
    frame = keyed(spark, samples)
    labels = {r["label_id"]: r for r in rows(tx.label_sets(frame), "label_id")}
    increases = tx.counter_increases(frame, tx.gateway_spans(frame))
    series = rows(tx.request_usage(increases, 60, []), "series")
    assert all(r["series"] is not None for r in series)  # no label set is gated here
    got = {r["client_software_version"]: r for r in tally.api_usage(series, labels)}
    assert got["3.7.0"]["requests"] == 4.0  # 3 on gw-a, 1 on gw-b
    assert got["3.7.0"]["first_seen"] == local(0)
    assert got["3.7.0"]["last_seen"] == local(2)
    assert got["3.7.0"]["gateways"] == ["gw-a", "gw-b"]
    # Counted before the window, never since: seen, but not in use.
    assert got["3.6.0"]["requests"] == 0.0 and got["3.6.0"]["last_seen"] is None
    assert got["2.6.1"]["first_seen"] == got["2.6.1"]["last_seen"] == local(3)


def test_gated_requests_per_chart_bucket_add_up_over_gateways(spark: SparkSession) -> None:
    gated, plain = request_labels(68, 0), request_labels(0, 9)
    samples = [
        *(
            (n, gw, tx.REQUESTS, gated, v)
            for gw in ("gw-a", "gw-b")
            for n, v in enumerate([0, 10, 30, 60])
        ),
        *((n, "gw-a", tx.REQUESTS, plain, v) for n, v in enumerate([0, 5, 5, 5])),
    ]
    frame = keyed(spark, samples)
    label_rows = rows(tx.label_sets(frame), "label_id")
    levels = tally.gated_levels(load_catalogue(None), label_rows)
    assert levels == {(68, 0): ("group.version", 1)}
    increases = tx.counter_increases(frame, tx.gateway_spans(frame))
    got = rows(tx.request_usage(increases, 30, tally.gated_label_ids(label_rows, levels)), "bucket")
    # Three series, and two 30 s buckets of the gated label set (scrapes 0-1 and 2-3).
    assert len([r for r in got if r["series"] is not None]) == 3
    buckets = [r for r in got if r["series"] is None]
    labels = {r["label_id"]: r for r in label_rows}
    chart = tally.gated_series(buckets, labels, levels, 30)
    start = int(T0.timestamp())
    assert [(c["bucket"], c["feature"], c["level"], c["rate"]) for c in chart] == [
        (start, "group.version", 1, 2 * 10 / 30),  # the first sample is a baseline
        (start + 30, "group.version", 1, 2 * 50 / 30),
    ]


def test_connections_now_and_peak_per_client_software(spark: SparkSession) -> None:
    rdk = label_text(
        listener="plain", client_software_name="librdkafka", client_software_version="2.6.1"
    )
    samples = [
        (0, "gw-a", tx.CONNECTIONS, rdk, 3),
        (0, "gw-b", tx.CONNECTIONS, rdk, 4),
        (1, "gw-a", tx.CONNECTIONS, rdk, 1),
        (1, "gw-b", tx.CONNECTIONS, rdk, 2),
        (1, "gw-b", tx.INFO, label_text(gateway_id="gw-b"), 1),
    ]
    frame = keyed(spark, samples)
    small = tx.labelled(frame, tx.label_sets(frame), [tx.CONNECTIONS, tx.INFO])
    # One-second buckets: a bucket per scrape, so peak and now come from different rows.
    buckets = rows(tx.connections_by_bucket(small, tx.gateway_spans(frame), 1), "bucket")
    assert [(g["connections"], g["peak"], g["now"]) for g in buckets] == [
        (7.0, 7.0, None),
        (3.0, 3.0, 3.0),
    ]
    # (peak, now) per client software: now is gw-a's 1 and gw-b's 2 at their last scrape.
    assert tally.connections_per_client(buckets) == {("librdkafka", "2.6.1"): (7.0, 3.0)}


def test_gated_usage_names_the_feature_level_each_api_version_needs() -> None:
    usage = [
        {
            "api_key": key,
            "api": api,
            "api_version": version,
            "client_software_name": name,
            "client_software_version": "1",
            "requests": 10.0,
            "first_seen": None,
            "last_seen": None,
            "gateways": ["gw"],
        }
        for key, api, version, name in [
            (68, "ConsumerGroupHeartbeat", 0, "librdkafka"),
            (68, "ConsumerGroupHeartbeat", 0, None),
            (0, "Produce", 11, "x"),
        ]
    ]
    levels = tally.gated_levels(
        load_catalogue(None),
        [{"api_key": r["api_key"], "api_version": r["api_version"]} for r in usage],
    )
    assert levels == {(68, 0): ("group.version", 1)}
    connections = {("librdkafka", "1"): (4.0, 2.0), (None, "1"): (9.0, 9.0)}
    got = tally.gated_clients(usage, levels, connections)
    assert [(g["api"], g["feature"], g["level"]) for g in got] == [
        ("ConsumerGroupHeartbeat", "group.version", 1)
    ] * 2
    # A client without a name matches no connections, as the SQL join on nulls did.
    assert [(g["connections_peak"], g["connections_now"]) for g in got] == [(4.0, 2.0), (0.0, 0.0)]


# -- features and verdicts (decided on the driver: featurectl.plan.decide) ----------------

CATALOGUE = {"group.version": 1, "transaction.version": 2}


def support_rows(
    support: Mapping[str, Mapping[str, tuple[int, int]]],
) -> list[tuple[str, str, int, int]]:
    return [(g, f, lo, hi) for g, fs in support.items() for f, (lo, hi) in fs.items()]


def test_cluster_max_is_the_lowest_maximum_and_missing_means_zero() -> None:
    support = {
        "gw-new": {"group.version": (0, 1), "transaction.version": (0, 2)},
        "gw-old": {"group.version": (0, 1), "transaction.version": (0, 1)},
        "gw-ancient": {"transaction.version": (0, 2)},
    }
    got = {
        r["feature"]: r
        for r in decide.feature_levels(
            CATALOGUE, sorted(support), support_rows(support), {"transaction.version": 1}
        )
    }
    assert got["transaction.version"]["cluster_max_level"] == 1
    assert got["transaction.version"]["finalized_level"] == 1
    assert got["group.version"]["cluster_max_level"] == 0  # gw-ancient does not list it
    assert got["group.version"]["live_gateways"] == 3
    assert got["group.version"]["support"][0] == {
        "gateway_id": "gw-ancient",
        "min_level": 0,
        "max_level": 0,
    }


def test_no_live_gateway_vouches_for_no_level() -> None:
    got = decide.feature_levels(CATALOGUE, [], [], {})
    assert [(g["cluster_max_level"], g["live_gateways"], g["support"]) for g in got] == [
        (None, 0, []),
        (None, 0, []),
    ]


def test_blocking_gateways_are_those_whose_range_misses_the_level() -> None:
    support = {
        "gw-new": {"transaction.version": (0, 2)},
        "gw-old": {"transaction.version": (0, 1)},
        "gw-none": {},
    }
    got = decide.blocking_gateways(
        {"transaction.version": 2, "group.version": 0}, sorted(support), support_rows(support)
    )
    # Level 0 (leaving a feature unfinalized) is never blocked.
    assert [(g["feature"], g["gateway_id"], g["max_level"]) for g in got] == [
        ("transaction.version", "gw-none", None),
        ("transaction.version", "gw-old", 1),
    ]


def verdicts_for(
    support: Mapping[str, Mapping[str, tuple[int, int]]],
    finalized: Mapping[str, int],
    wanted: Mapping[str, int],
    clients: Sequence[tuple[str, int, float, str, str]] = (),
) -> dict[str, dict[str, Any]]:
    blockers = decide.blocking_gateways(wanted, sorted(support), support_rows(support))
    gated = [
        dict(
            zip(
                ("feature", "level", "requests", *tx.CLIENT),
                client,
                strict=True,
            )
        )
        for client in clients
    ]
    return {
        r["feature"]: r for r in decide.verdicts(wanted, finalized, blockers, gated, len(support))
    }


def test_finalizing_is_safe_when_every_live_gateway_supports_the_level() -> None:
    got = verdicts_for(
        {"a": {"transaction.version": (0, 2)}, "b": {"transaction.version": (0, 2)}},
        {"transaction.version": 1},
        {"transaction.version": 2},
    )["transaction.version"]
    assert (got["kind"], got["safe"], got["blocking_gateways"]) == ("upgrade", True, [])


def test_finalizing_is_unsafe_while_an_old_gateway_is_live() -> None:
    got = verdicts_for(
        {"a": {"transaction.version": (0, 2)}, "b": {"transaction.version": (0, 1)}},
        {"transaction.version": 1},
        {"transaction.version": 2},
    )["transaction.version"]
    assert (got["kind"], got["safe"], got["blocking_gateways"]) == ("upgrade", False, ["b"])


def test_finalizing_with_no_live_gateway_is_unsafe() -> None:
    got = verdicts_for({}, {}, {"group.version": 1})["group.version"]
    assert (got["kind"], got["safe"]) == ("upgrade", False)


def test_disabling_is_unsafe_while_a_client_uses_a_gated_version() -> None:
    got = verdicts_for(
        {"a": {"group.version": (0, 1)}},
        {"group.version": 1},
        {"group.version": 0},
        [
            ("group.version", 1, 12.0, "librdkafka", "2.6.1"),
            ("group.version", 1, 0.0, "apache-kafka-java", "3.6.0"),  # seen, not in use
        ],
    )["group.version"]
    assert got["kind"] == "disable" and got["safe"] is False
    assert got["blocking_clients"] == [
        {"client_software_name": "librdkafka", "client_software_version": "2.6.1"}
    ]
    assert got["blocking_gateways"] == [] and got["blocking_requests"] == 12.0


def test_downgrading_ignores_clients_of_levels_the_target_keeps() -> None:
    got = verdicts_for(
        {"a": {"transaction.version": (0, 2)}},
        {"transaction.version": 2},
        {"transaction.version": 1},
        [("transaction.version", 1, 50.0, "librdkafka", "2.6.1")],
    )["transaction.version"]
    assert (got["kind"], got["safe"], got["blocking_clients"]) == ("downgrade", True, [])


def test_a_target_at_the_finalized_level_is_a_safe_noop() -> None:
    got = verdicts_for(
        {"a": {"group.version": (0, 1)}},
        {"group.version": 1},
        {"group.version": 1},
    )["group.version"]
    assert (got["kind"], got["safe"]) == ("noop", True)


def test_support_and_finalized_from_the_gateways_own_gauges(spark: SparkSession) -> None:
    tv = label_text(feature="transaction.version")
    samples = [
        (0, "gw-a", tx.SUPPORTED_MAX, tv, 1),  # superseded by the later scrape
        (1, "gw-a", tx.SUPPORTED_MAX, tv, 2),
        (1, "gw-a", tx.SUPPORTED_MIN, tv, 0),
        (1, "gw-a", tx.FINALIZED_LEVEL, tv, 2),
        (0, "gw-b", tx.FINALIZED_LEVEL, tv, 1),  # older than gw-a's report of 2
        (1, "gw-b", tx.SUPPORTED_MAX, tv, 1),
        (1, "gw-b", tx.FINALIZED_LEVEL, label_text(feature="group.version"), 0),
    ]
    frame = keyed(spark, samples)
    small = tx.labelled(frame, tx.label_sets(frame), tx.PLAN_METRICS)
    spans = tx.gateway_spans(frame)
    support = rows(tx.support_from_metrics(small, spans), "gateway_id")
    assert [(s["gateway_id"], s["min_level"], s["max_level"]) for s in support] == [
        ("gw-a", 0, 2),
        ("gw-b", 0, 1),
    ]
    # The newest report wins; a level of 0 is "not finalized".
    assert rows(tx.finalized_from_metrics(small), "feature") == [
        {"feature": "transaction.version", "level": 2}
    ]
