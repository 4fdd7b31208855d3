"""A gateway with several worker processes (``--workers``), seen from outside as one.
(Cluster mode with workers: tests/integration/test_cluster_mode.py.)

Real ZooKeeper, the session's broker (Tansu for the epoch test), gateways as separate
processes, raw Kafka requests and a real client library. Each test reads what an operator
would: the wire, /metrics, /connections, /readyz, ZooKeeper's registrations and the log.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer

from gateway.features.store import FeatureStore
from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess, KafkaConnection, TansuBroker, ZooKeeperProcess
from tests.harness.kafka_wire import parse_features
from tests.integration.test_features import (
    CATALOGUE_A,
    FEATURE,
    finalize,
    http_status,
    start_gateway,
    wait_for,
)

WORKERS = 3


def worker_pids(gw: GatewayProcess) -> set[int]:
    """The gateway's worker processes, read from /proc: the children of its fork server
    (the supervisor's own children are the fork server and the resource tracker)."""
    assert gw.pid is not None
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    helpers = {pid for pid, parent in parents.items() if parent == gw.pid}
    return {pid for pid, parent in parents.items() if parent in helpers}


def connections(gw: GatewayProcess) -> list[dict[str, object]]:
    url = gw.metrics_url.replace("/metrics", "/connections")
    rows: list[dict[str, object]] = json.load(urllib.request.urlopen(url, timeout=5))
    return rows


def scrape(gw: GatewayProcess) -> dict[str, float]:
    """Every sample of /metrics, by its exposition line's name and labels."""
    text = urllib.request.urlopen(gw.metrics_url, timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def total(samples: dict[str, float], name: str) -> float:
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


def spread_connections(gw: GatewayProcess, count: int) -> list[KafkaConnection]:
    """Open ``count`` connections, each with one answered request."""
    conns = []
    for _ in range(count):
        conn = KafkaConnection(gw.host, gw.port)
        conn.api_versions(3)
        conns.append(conn)
    return conns


def _workers_gateway(
    factory: GatewayFactory, zookeeper: ZooKeeperProcess, tmp_path: Path, **kwargs: Any
) -> GatewayProcess:
    gw = start_gateway(
        factory, zookeeper, tmp_path, "gw-w", CATALOGUE_A, "--workers", str(WORKERS), **kwargs
    )
    wait_for(lambda: http_status(gw, "/readyz") == 200, what="ready")
    return gw


@pytest.fixture
def workers_gateway(
    gateway_factory: GatewayFactory, zookeeper: ZooKeeperProcess, tmp_path: Path
) -> GatewayProcess:
    """A gateway with WORKERS workers in front of the session's broker."""
    return _workers_gateway(gateway_factory, zookeeper, tmp_path)


@pytest.fixture
def tansu_workers_gateway(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    tmp_path: Path,
    tansu_broker: TansuBroker,
) -> GatewayProcess:
    """The same in front of Tansu, for a test that pins the gateway's own epoch: a broker
    that reports no features of its own (Tansu) leaves the answer's epoch the gateway's
    (in front of Kafka 4.4 it is merged with the KRaft metadata offset, which moves on its
    own; tests/integration/test_upstream_features.py covers that merge)."""
    return _workers_gateway(gateway_factory, zookeeper, tmp_path, upstream=tansu_broker.bootstrap)


def test_workers_share_the_connections_and_look_like_one_gateway(
    workers_gateway: GatewayProcess, store: FeatureStore
) -> None:
    gw = workers_gateway
    assert len(worker_pids(gw)) == WORKERS
    conns = spread_connections(gw, 30)
    try:
        rows = wait_for(lambda: r if len(r := connections(gw)) >= 30 else None, what="rows")
        # SO_REUSEPORT spreads 30 connections over the workers (hash of the client
        # port): that all land on one of 3 is a 3·(1/3)^30 chance.
        assert len({row["worker"] for row in rows}) > 1
        assert len({row["connection_id"] for row in rows if row["worker"] == 0}) == len(
            [row for row in rows if row["worker"] == 0]
        )
        samples = scrape(gw)
        # Counters are the sum over the workers, under today's names and labels.
        assert total(samples, "kafka_gateway_connections_total") >= 30
        api_versions = sum(
            value
            for key, value in samples.items()
            if key.startswith("kafka_gateway_requests_total{")
            and 'api="ApiVersions"' in key
            and 'api_version="3"' in key
        )
        assert api_versions >= 30
        assert total(samples, "kafka_gateway_connections_active") >= 30
        assert samples["kafka_gateway_worker_restarts_total"] == 0
    finally:
        for conn in conns:
            conn.close()
    # One registration, however many workers.
    assert [r.gateway_id for r in store.registrations()] == ["gw-w"]


def test_a_finalize_reaches_every_worker(
    tansu_workers_gateway: GatewayProcess, store: FeatureStore
) -> None:
    gw = tansu_workers_gateway
    epoch = finalize(store, test_version=1)

    def every_connection_sees_it() -> bool:
        # 24 fresh connections land on every worker with near certainty (3·(2/3)^24).
        for _ in range(24):
            with KafkaConnection(gw.host, gw.port) as conn:
                features = parse_features(conn.api_versions(3))
            if features.epoch != epoch or features.finalized != {FEATURE: (1, 1)}:
                return False
        return True

    wait_for(every_connection_sees_it, what=f"epoch {epoch} on every worker")
    # /metrics shows the oldest epoch any worker serves: the new one, once all have it.
    samples = scrape(gw)
    assert samples["kafka_gateway_feature_finalized_epoch"] == epoch


def test_a_killed_worker_is_restarted_and_the_others_never_notice(
    workers_gateway: GatewayProcess,
) -> None:
    gw = workers_gateway
    conns = spread_connections(gw, 30)
    rows = wait_for(lambda: r if len(r := connections(gw)) >= 30 else None, what="rows")
    before = total(scrape(gw), "kafka_gateway_connections_total")
    victim = min(worker_pids(gw))
    os.kill(victim, signal.SIGKILL)
    gw.wait_for_log(r'"event": "worker.died"', timeout=10)
    assert "signal SIGKILL" in gw.log_text()

    # Connections on the surviving workers keep working on the same socket; those the
    # killed worker held are closed (their clients reconnect).
    survived = closed = 0
    for conn in conns:
        try:
            conn.api_versions(3, timeout=5)
            survived += 1
        except (OSError, ConnectionError):
            closed += 1
        finally:
            conn.close()
    assert survived > 0 and closed > 0, (survived, closed, rows)

    wait_for(lambda: len(worker_pids(gw)) == WORKERS, what="the worker restarted")
    assert victim not in worker_pids(gw)
    wait_for(
        lambda: (
            urllib.request.urlopen(gw.metrics_url.replace("/metrics", "/readyz"), timeout=5).read()
            == f"ready ({WORKERS}/{WORKERS} workers)\n".encode()
        ),
        what="every worker ready",
    )
    samples = scrape(gw)
    assert samples["kafka_gateway_worker_restarts_total"] == 1
    # The dead worker's counts stay in the sums: no counter goes backwards.
    assert total(samples, "kafka_gateway_connections_total") >= before
    # New clients are served, by the restarted worker too.
    spread = spread_connections(gw, 24)
    for conn in spread:
        conn.close()


def test_sigterm_drains_every_worker_and_exits_0(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    gw = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-t", CATALOGUE_A, "--workers", "2")
    wait_for(lambda: store.registrations(), what="registered")
    pids = worker_pids(gw)
    assert len(pids) == 2
    # A client that produces through the gateway while it stops: its record is acknowledged.
    producer = KafkaProducer(bootstrap_servers=gw.bootstrap, acks=1)
    producer.send("workers-drain", b"before stop").get(timeout=30)
    producer.close()
    assert gw.stop() == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert gw.log_text().count('"event": "gateway.stopped"') == 3  # both workers + supervisor
    assert store.registrations() == []


def test_each_sighup_is_counted_once_however_many_workers(
    workers_gateway: GatewayProcess,
) -> None:
    # Every worker reloads on the supervisor's SIGHUP and counts it in its own registry;
    # summed like other counters, 3 SIGHUPs would read 3 * (WORKERS + 1).
    gw = workers_gateway
    assert gw.pid is not None
    for sighups in (1, 2, 3):
        os.kill(gw.pid, signal.SIGHUP)
        wait_for(
            lambda n=sighups: (
                scrape(gw).get('kafka_gateway_config_reloads_total{result="ok"}') == n
            ),
            what=f"{sighups} reloads counted",
        )
    # Every process (the supervisor's control plane and each worker) has reloaded 3 times
    # by now, and each scrape reads the workers' counts afresh.
    wait_for(
        lambda: gw.log_path.read_text().count('"event": "gateway.reload"') >= 3 * (WORKERS + 1),
        what="every process's reloads logged",
    )
    samples = scrape(gw)
    assert samples['kafka_gateway_config_reloads_total{result="ok"}'] == 3
    assert samples['kafka_gateway_config_reloads_total{result="failed"}'] == 0
