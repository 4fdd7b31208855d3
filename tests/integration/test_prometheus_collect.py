"""``featurectl collect --prometheus``: a real Prometheus scraping real gateways, pulled
over its HTTP API into the Parquet dataset.

Two gateways serve /metrics; Prometheus (Debian's package, ``prometheus`` fixture)
scrapes them every second while a client sends ApiVersions through each. The pull must
give, per gateway (named by its ``kafka_gateway_info``), exactly the points one
query_range over the whole range gives, although it is paged in time; and a week at
15 s (40,321 points a series, beyond Prometheus' 11,000) must page instead of failing.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset
import pytest

from featurectl.collect import FIRST_PAGE_POINTS, MAX_POINTS_PER_SERIES
from featurectl.plan.columnar import SAMPLES
from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess, KafkaConnection
from tests.harness.procs import HarnessError
from tests.harness.prometheus import PrometheusProcess

REQUESTS = "kafka_gateway_requests_total"
RUN_TIMEOUT_S = 120
# A client's ApiVersions v3 names it (KIP-511): the label the series must carry.
CLIENT = 'client_software_name="kafka-gateway-tests"'


def collect(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "featurectl", "collect", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def rows(out: Path) -> list[dict]:
    table = pyarrow.dataset.dataset(out / SAMPLES, partitioning="hive").to_table()
    return table.to_pylist()


def send_api_versions(gw: GatewayProcess, times: int) -> None:
    with KafkaConnection(gw.host, gw.port) as conn:
        for _ in range(times):
            conn.api_versions(3)


@pytest.fixture
def scraped_gateways(
    prometheus: PrometheusProcess, gateway_factory: GatewayFactory
) -> list[GatewayProcess]:
    gateways = [gateway_factory(metrics=True, name=f"gw-{n}") for n in "ab"]
    prometheus.set_targets([gw.metrics_address for gw in gateways])
    prometheus.wait_targets_up()
    for times, gw in enumerate(gateways, start=2):
        send_api_versions(gw, times)
    for gw in gateways:
        prometheus.wait_for(f'{REQUESTS}{{instance="{gw.metrics_address}",{CLIENT}}}')
    # A few more scrapes, so the range holds more than one point per series.
    time.sleep(3)
    return gateways


def test_a_paged_pull_holds_what_one_query_range_answers(
    prometheus: PrometheusProcess, scraped_gateways: list[GatewayProcess], tmp_path: Path
) -> None:
    end = time.time()
    start, step = end - 2 * FIRST_PAGE_POINTS, 1.0  # 121 points: at least two pages
    done = collect(
        tmp_path,
        "--prometheus",
        prometheus.url,
        "--range",
        f"{2 * FIRST_PAGE_POINTS}s",
        "--step",
        "1s",
        "--end",
        f"{end}",
    )
    assert done.returncode == 0, done.stderr
    info = {
        s["metric"]["instance"]: s["metric"]["gateway_id"]
        for s in prometheus.query("kafka_gateway_info")
    }
    assert set(info) == {gw.metrics_address for gw in scraped_gateways}
    expected = {
        (info[s["metric"]["instance"]], round(float(t) * 1000), float(v))
        for s in prometheus.query_range(f"{REQUESTS}{{{CLIENT}}}", start, end, step)
        for t, v in s["values"]
    }
    pulled = [r for r in rows(tmp_path) if r["metric"] == REQUESTS and CLIENT in r["label_text"]]
    got = [(r["gateway_id"], int(r["ts"].timestamp() * 1000), r["value"]) for r in pulled]
    # Every point once: pages neither overlap nor leave a gap.
    assert len(got) == len(set(got)) and set(got) == expected
    # Each gateway under its own id, with its own count: gw-b got one ApiVersions more.
    assert {g for g, _, _ in got} == set(info.values())
    a, b = (info[gw.metrics_address] for gw in scraped_gateways)
    assert max(v for g, _, v in got if g == b) - max(v for g, _, v in got if g == a) == 1
    # Prometheus' target labels are not the gateway's: they do not reach the dataset.
    assert not any("instance=" in r["label_text"] or "job=" in r["label_text"] for r in pulled)


def test_a_week_at_15s_is_paged_under_the_points_limit(
    prometheus: PrometheusProcess, scraped_gateways: list[GatewayProcess], tmp_path: Path
) -> None:
    week, step = 7 * 86400, 15
    assert week // step + 1 > MAX_POINTS_PER_SERIES
    # What a single query of that range gets: Prometheus refuses it.
    with pytest.raises(HarnessError, match="11,000 points"):
        prometheus.query_range(REQUESTS, time.time() - week, time.time(), step)
    done = collect(tmp_path, "--prometheus", prometheus.url, "--range", "7d", "--step", "15s")
    assert done.returncode == 0, done.stderr
    pulled = {r["gateway_id"] for r in rows(tmp_path) if r["metric"] == REQUESTS}
    assert len(pulled) == 2


def test_an_empty_range_collects_nothing_and_exits_1(
    prometheus: PrometheusProcess, scraped_gateways: list[GatewayProcess], tmp_path: Path
) -> None:
    # A day that ended a year ago: Prometheus has no gateway series then.
    end = f"{time.time() - 365 * 86400}"
    done = collect(tmp_path, "--prometheus", prometheus.url, "--range", "1d", "--end", end)
    assert done.returncode == 1
    assert "has no kafka_gateway_* series" in done.stderr
