"""``featurectl collect`` against real HTTP servers (prometheus_client's own), and the
Prometheus query_range converter.

The servers serve a registry filled here with the gateway's metric names, so the files
written are exactly what a scrape of a gateway produces.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from featurectl import cli
from featurectl.plan.columnar import SAMPLES, exposition_samples
from featurectl.plan.layout import SCRAPES, decode_name, round_time_ms
from featurectl.prometheus import (
    ExportError,
    duration_arg,
    export_to_exposition,
    import_exports,
    read_export,
    time_arg,
)
from featurectl.scrape import (
    Target,
    collect_round,
    merge_targets,
    scrape,
    targets_from_registry,
)
from gateway.features.znode import Registration
from gateway.observability.traffic_metrics import TRAFFIC_LABELS
from tests.harness import free_port


def closed_url() -> str:
    """A URL nobody listens on (the port was free a moment ago)."""
    return f"http://127.0.0.1:{free_port()}/metrics"


def gateway_registry(gateway_id: str | None, heartbeats: int) -> CollectorRegistry:
    registry = CollectorRegistry()
    requests = Counter("kafka_gateway_requests", "requests", TRAFFIC_LABELS, registry=registry)
    requests.labels("plain", "68", "ConsumerGroupHeartbeat", "0", "librdkafka", "2.6.1").inc(
        heartbeats
    )
    Gauge(
        "kafka_gateway_connections_active",
        "connections",
        ["listener", "client_software_name", "client_software_version"],
        registry=registry,
    ).labels("plain", "librdkafka", "2.6.1").set(2)
    if gateway_id is not None:
        Gauge(
            "kafka_gateway_info",
            "info",
            [
                "gateway_id",
                "gateway_version",
                "broker_software_name",
                "broker_software_version",
                "upstream",
            ],
            registry=registry,
        ).labels(gateway_id, "0.1.0", "apache-kafka", "4.0", "broker:9093").set(1)
    return registry


@pytest.fixture
def serve() -> Iterator:
    """``serve(registry)`` → the /metrics URL of a real HTTP server for that registry."""
    servers = []

    def start(registry: CollectorRegistry) -> str:
        port = free_port()
        server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
        servers.append(server)
        return f"http://127.0.0.1:{port}/metrics"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def scrape_files(out: Path) -> dict[str, tuple[str, dict]]:
    """gateway id (from the file name) → (exposition text, sidecar)."""
    found = {}
    for prom in sorted((out / SCRAPES).glob("*/*.prom")):
        sidecar = json.loads(prom.with_suffix(".json").read_text())
        found[decode_name(prom.stem)] = (prom.read_text(), sidecar)
    return found


def samples_of(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_a_round_scrapes_each_gateway_into_its_own_file_with_a_sidecar(serve, tmp_path) -> None:
    a = serve(gateway_registry("gw-a.example:9092", 5))
    b = serve(gateway_registry("gw-b.example:9092", 7))
    result = collect_round(tmp_path, [Target(a), Target(b)])
    assert len(result.written) == 2 and not result.failed
    files = scrape_files(tmp_path)
    assert set(files) == {"gw-a.example:9092", "gw-b.example:9092"}
    text, sidecar = files["gw-b.example:9092"]
    assert samples_of(text)["kafka_gateway_requests_total"] == 7.0
    assert sidecar["gateway_id"] == "gw-b.example:9092" and sidecar["url"] == b
    assert sidecar["source"] == "scrape" and sidecar["scrape_time_ms"] > 0
    # The round directory names the round's start, which the planner uses as sample time.
    assert round_time_ms(result.round_name) is not None


def test_the_registration_id_wins_and_a_silent_gateway_is_named_by_address(serve, tmp_path) -> None:
    registered = serve(gateway_registry("what-the-info-says", 1))
    anonymous = serve(gateway_registry(None, 1))
    collect_round(tmp_path, [Target(registered, "gw-7"), Target(anonymous)])
    assert set(scrape_files(tmp_path)) == {"gw-7", anonymous.split("/")[2]}


def test_an_unreachable_gateway_is_skipped_with_a_warning(serve, tmp_path, caplog) -> None:
    up = serve(gateway_registry("gw-up", 1))
    down = closed_url()
    with caplog.at_level(logging.WARNING, logger="featurectl.collect"):
        result = collect_round(tmp_path, [Target(down, "gw-down"), Target(up)], timeout=2)
    assert [url for url, _ in result.failed] == [down]
    assert set(scrape_files(tmp_path)) == {"gw-up"}
    assert f"cannot scrape {down}" in caplog.text


def test_one_gateway_reached_through_two_urls_is_kept_once(serve, tmp_path, caplog) -> None:
    registry = gateway_registry("gw-a", 1)
    first, second = serve(registry), serve(registry)
    with caplog.at_level(logging.WARNING, logger="featurectl.collect"):
        result = collect_round(tmp_path, [Target(first), Target(second)])
    assert len(result.written) == 1 and "same gateway" in caplog.text


def test_registry_targets_and_explicit_urls_merge_without_duplicates() -> None:
    regs = [
        Registration("gw-1", "l", "u", {}, metrics_url="http://gw-1:9404/metrics"),
        Registration("gw-2", "l", "u", {}, metrics_url=None),
    ]
    registered, without = targets_from_registry(regs)
    assert without == ["gw-2"]
    merged = merge_targets(registered, ["http://gw-1:9404/metrics/", "http://gw-9:9404/metrics"])
    assert merged == [
        Target("http://gw-1:9404/metrics", "gw-1"),
        Target("http://gw-9:9404/metrics"),
    ]


# -- the CLI ------------------------------------------------------------------------------


def test_cli_collects_rounds_and_points_at_plan(serve, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("KAFKA_GATEWAY_ZOOKEEPER", raising=False)
    url = serve(gateway_registry("gw-a", 3))
    args = ["--gateway", url, "--rounds", "2", "--interval", "0.1", "--out", str(tmp_path)]
    assert cli.main(["collect", "--format", "text", *args]) == 0
    assert len(list((tmp_path / SCRAPES).glob("*/*.prom"))) == 2
    assert f"featurectl plan --metrics {tmp_path}" in capsys.readouterr().out


def parquet_rows(out: Path) -> list[dict]:
    """Every sample row of the Parquet dataset under ``out``, as pyarrow reads it."""
    import pyarrow.dataset as ds

    table = ds.dataset(out / SAMPLES, format="parquet", partitioning="hive").to_table()
    return table.sort_by([("ts", "ascending"), ("metric", "ascending")]).to_pylist()


def test_cli_collects_into_parquet_by_default(serve, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("KAFKA_GATEWAY_ZOOKEEPER", raising=False)
    url = serve(gateway_registry("gw-a:9092", 3))
    args = ["--gateway", url, "--rounds", "3", "--interval", "0.1", "--out", str(tmp_path)]
    # --flush 0.1: a file after some rounds, the rest at exit; nothing lost either way.
    assert cli.main(["collect", *args, "--flush", "0.1"]) == 0
    assert not (tmp_path / SCRAPES).exists()
    rows = parquet_rows(tmp_path)
    times = sorted({r["ts"] for r in rows})
    assert len(times) == 3 and {r["gateway_id"] for r in rows} == {"gw-a:9092"}
    # Each round: every sample of the scrape, at the round's time, labels as written.
    (text, _), *_ = scrape_files_of(url, tmp_path / "text")
    per_round = [(m, lt, v) for m, lt, v, _ in exposition_samples(text)]
    for when in times:
        got = sorted((r["metric"], r["label_text"], r["value"]) for r in rows if r["ts"] == when)
        assert got == sorted(per_round)
    heartbeats = [r for r in rows if r["metric"] == "kafka_gateway_requests_total"]
    assert [r["value"] for r in heartbeats] == [3.0, 3.0, 3.0]
    assert heartbeats[0]["label_text"] == (
        'api="ConsumerGroupHeartbeat",api_key="68",api_version="0",'
        'client_software_name="librdkafka",client_software_version="2.6.1",listener="plain"'
    )
    assert {r["date"] for r in rows} == {times[0].strftime("%Y-%m-%d")}


def scrape_files_of(url: str, out: Path) -> list[tuple[str, dict]]:
    """One text-format round of ``url`` (what the Parquet rows must hold)."""
    collect_round(out, [Target(url)])
    return list(scrape_files(out).values())


def test_the_sample_reader_agrees_with_prometheus_client(serve) -> None:
    registry = gateway_registry("gw-a:9092", 7)
    text = scrape(serve(registry))
    ours = {(m, v) for m, _, v, ts in exposition_samples(text) if ts is None}
    theirs = {(s.name, s.value) for f in text_string_to_metric_families(text) for s in f.samples}
    assert ours == theirs
    assert list(exposition_samples('m{a="x}y"} 2 1700000000000\n# c\n\nbad{a="1"} x\n')) == [
        ("m", 'a="x}y"', 2.0, 1700000000000)
    ]


def test_cli_exits_1_when_nothing_was_collected(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("KAFKA_GATEWAY_ZOOKEEPER", raising=False)
    code = cli.main(["collect", "--gateway", closed_url(), "--once", "--out", str(tmp_path)])
    assert code == 1


def test_cli_usage_errors_exit_2(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("KAFKA_GATEWAY_ZOOKEEPER", raising=False)
    assert cli.main(["collect", "--out", str(tmp_path)]) == 2
    assert "give --zookeeper" in capsys.readouterr().err
    # Nobody listens there: a ZooKeeper connection error, not "nothing collected".
    zookeeper = f"127.0.0.1:{free_port()}"
    args = ["collect", "--zookeeper", zookeeper, "--timeout", "1", "--once", "--out", str(tmp_path)]
    assert cli.main(args) == 2
    assert f"cannot connect to ZooKeeper {zookeeper}" in capsys.readouterr().err


# -- Prometheus query_range exports ---------------------------------------------------------


def export(*series: dict) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": list(series)}}


def matrix(name: str, labels: dict[str, str], points: list[tuple[float, str]]) -> dict:
    return {"metric": {"__name__": name, **labels}, "values": [[t, v] for t, v in points]}


T = 1736121600.0


def test_a_query_range_export_becomes_one_timestamped_file_per_gateway(tmp_path) -> None:
    target_a = {"instance": "10.0.0.1:9404", "job": "kafka-gateway"}
    target_b = {"instance": "10.0.0.2:9404", "job": "kafka-gateway"}
    heartbeat = {
        "listener": "plain",
        "api_key": "68",
        "api": "ConsumerGroupHeartbeat",
        "api_version": "0",
        "client_software_name": "librdkafka",
        "client_software_version": "2.6.1",
    }
    doc = export(
        matrix("kafka_gateway_info", {**target_a, "gateway_id": "gw-a:9092"}, [(T, "1")]),
        matrix(
            "kafka_gateway_requests_total", {**target_a, **heartbeat}, [(T, "5"), (T + 15, "9")]
        ),
        matrix("kafka_gateway_requests_total", {**target_b, **heartbeat}, [(T + 0.5, "1")]),
    )
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))
    written = import_exports(tmp_path / "data", [path])
    files = scrape_files(tmp_path / "data")
    # gw-a is named by its info series; the other instance only by its address.
    assert set(files) == {"gw-a:9092", "10.0.0.2:9404"} and len(written) == 2
    text, sidecar = files["gw-a:9092"]
    assert sidecar["source"] == "prometheus"
    lines = [line for line in text.splitlines() if line.startswith("kafka_gateway_requests")]
    assert lines == [
        'kafka_gateway_requests_total{api="ConsumerGroupHeartbeat",api_key="68",'
        'api_version="0",client_software_name="librdkafka",client_software_version="2.6.1",'
        f'listener="plain"}} 5 {int(T * 1000)}',
        'kafka_gateway_requests_total{api="ConsumerGroupHeartbeat",api_key="68",'
        'api_version="0",client_software_name="librdkafka",client_software_version="2.6.1",'
        f'listener="plain"}} 9 {int((T + 15) * 1000)}',
    ]
    # Valid exposition text: Prometheus' own parser reads it back (untyped, names as-is).
    families = list(text_string_to_metric_families(text))
    assert {f.name for f in families} == {"kafka_gateway_info", "kafka_gateway_requests_total"}


def test_label_values_are_escaped_when_written(tmp_path) -> None:
    per_gateway = export_to_exposition(
        [{"metric": {"__name__": "m", "instance": "i", "odd": 'a"b\\c\nd'}, "values": [[T, "1"]]}]
    )
    (line,) = per_gateway["i"]
    assert line == f'm{{odd="a\\"b\\\\c\\nd"}} 1 {int(T * 1000)}'
    sample = next(iter(text_string_to_metric_families(line + "\n"))).samples[0]
    assert sample.labels == {"odd": 'a"b\\c\nd'}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("not json", "not readable JSON"),
        ({"status": "error", "error": "bad query"}, "status 'success'"),
        ({"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}}, "scalar"),
        (export({"metric": {}, "values": []}), "no __name__"),
    ],
)
def test_exports_that_are_not_query_range_answers_are_refused(tmp_path, doc, message) -> None:
    path = tmp_path / "export.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(ExportError, match=message):
        read_export(path)


def test_cli_imports_exports_without_scraping(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("KAFKA_GATEWAY_ZOOKEEPER", raising=False)
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(export(matrix("m", {"instance": "i"}, [(T, "1")]))))
    bad.write_text(json.dumps({"status": "error"}))
    out = tmp_path / "data"
    assert cli.main(["collect", "--from-prometheus", str(good), "--out", str(out)]) == 0
    assert [(r["gateway_id"], r["metric"], r["value"]) for r in parquet_rows(out)] == [
        ("i", "m", 1.0)
    ]
    assert cli.main(["collect", "--from-prometheus", str(bad), "--out", str(out)]) == 2


# -- --prometheus (the real server is in tests/integration/test_prometheus_collect.py) ------


def test_an_unreachable_prometheus_is_a_usage_error(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("KAFKA_GATEWAY_ZOOKEEPER", raising=False)
    url = f"http://127.0.0.1:{free_port()}"
    assert cli.main(["collect", "--prometheus", url, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"cannot query Prometheus at {url}" in err and "check --prometheus" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--range", "7x"], "expected a duration like 7d"),
        (["--step", "0s"], "must be > 0"),
        (["--end", "yesterday"], "expected RFC 3339"),
    ],
)
def test_bad_ranges_are_refused_by_the_parser(tmp_path, capsys, args, message) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["collect", "--prometheus", "http://p:9090", "--out", str(tmp_path), *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_step_longer_than_the_range_is_refused(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("KAFKA_GATEWAY_ZOOKEEPER", raising=False)
    args = ["--prometheus", "http://p:9090", "--range", "1h", "--step", "2h"]
    assert cli.main(["collect", *args, "--out", str(tmp_path)]) == 2
    assert "--step 7200s is longer than --range 3600s" in capsys.readouterr().err


def test_durations_read_as_prometheus_writes_them() -> None:
    assert [duration_arg(t) for t in ("7d", "1h30m", "15s", "90", "500ms")] == [
        604800,
        5400,
        15,
        90,
        0.5,
    ]
    assert time_arg("2025-01-08T00:00:00Z") == time_arg("1736294400") == 1736294400
