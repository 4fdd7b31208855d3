"""Feature gating end to end: a real ZooKeeper, real gateways, raw Kafka requests.

The catalogue used here gates versions the Tansu broker really has, so a level can be
finalized and its versions actually served: ``test.version`` level 1 enables
DescribeCluster v1, level 2 enables Metadata v12. Gateway "a" knows both levels,
gateway "b" only level 1 (an older gateway build).

These tests pin the gateways' own levels and epochs, so they run in front of Tansu
whatever ``KAFKA_GATEWAY_TEST_BROKER`` says (the ``broker`` override below): a broker that
reports no features of its own keeps the gateways' answer theirs alone.
tests/integration/test_upstream_features.py covers the merge with Apache Kafka's.
"""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kazoo.exceptions import KazooException
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest

from gateway.features.store import FeatureStore
from gateway.features.znode import Finalized
from tests.conftest import GatewayFactory
from tests.harness import (
    ConnectionClosed,
    GatewayProcess,
    KafkaConnection,
    TansuBroker,
    ZooKeeperProcess,
)
from tests.harness.kafka_wire import Features, parse_features
from tests.integration.conftest import CHROOT

FEATURE = "test.version"
CATALOGUE_A = f"""
[features."{FEATURE}"]
levels.1 = ["DescribeCluster>=1"]
levels.2 = ["Metadata>=12"]
"""
CATALOGUE_B = f"""
[features."{FEATURE}"]
levels.1 = ["DescribeCluster>=1"]
"""
DESCRIBE_CLUSTER = 60
METADATA = 3
UNSUPPORTED_VERSION = 35
T = TypeVar("T")


@pytest.fixture
def broker(tansu_broker: TansuBroker) -> TansuBroker:
    """Tansu, whatever the session's broker: these tests pin the gateways' own levels and
    epochs, and a broker that reports no features of its own (Tansu) keeps them apart
    from a broker's (tests/integration/test_upstream_features.py covers the merge with
    Kafka's). The catalogue also gates versions picked for Tansu (Metadata v12 is below
    its max)."""
    return tansu_broker


def catalogue(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return str(path)


def fleet_member(zookeeper: ZooKeeperProcess, name: str) -> tuple[str, ...]:
    """The options that register a gateway as ``name`` in the tests' feature store."""
    return (
        "--zookeeper",
        zookeeper.connect_string,
        "--zookeeper-chroot",
        CHROOT,
        "--gateway-id",
        name,
    )


def start_gateway(
    factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    tmp_path: Path,
    name: str,
    text: str = CATALOGUE_A,
    *extra: str,
    **kwargs: Any,
) -> GatewayProcess:
    return factory(
        *fleet_member(zookeeper, name),
        "--features-catalogue",
        catalogue(tmp_path, name, text),
        *extra,
        metrics=True,
        name=name,
        **kwargs,
    )


def features_of(gw: GatewayProcess) -> tuple[Features, dict[int, tuple[int, int]]]:
    with KafkaConnection(gw.host, gw.port) as conn:
        answer = conn.api_versions(4)
    assert answer.error_code == 0
    return parse_features(answer), answer.api_keys


def wait_for(check: Callable[[], T | None], timeout: float = 15.0, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, ConnectionClosed, KazooException) as exc:
            # KazooException: the test's own ZooKeeper session may expire across an
            # outage the test causes; kazoo starts a new one on the next try.
            last = exc
        else:
            if last:
                return last
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what or check}: last={last!r}")


def metric(gw: GatewayProcess, name: str) -> float | None:
    text = urllib.request.urlopen(gw.metrics_url, timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def rejected(gw: GatewayProcess, reason: str) -> float:
    """kafka_gateway_rejected_requests_total of ``reason``, summed over API, version and
    client."""
    text = urllib.request.urlopen(gw.metrics_url, timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("kafka_gateway_rejected_requests_total{")
        and f'reason="{reason}"' in line
    )


def http_status(gw: GatewayProcess, path: str) -> int:
    url = gw.metrics_url.replace("/metrics", path)
    try:
        return urllib.request.urlopen(url, timeout=5).status
    except urllib.error.HTTPError as exc:
        return exc.code


def describe_cluster_v1(conn: KafkaConnection) -> int:
    """Error code of a DescribeCluster v1 request (35 when the gateway withholds v1).

    Read by hand (throttle_time_ms int32, then error_code): the gateway's KIP-885 tags
    would make kio's decoder raise.
    """
    request = DescribeClusterRequest(include_cluster_authorized_operations=False)
    response = conn.request(DESCRIBE_CLUSTER, 1, request)
    return struct.unpack_from(">h", response.body, 4)[0]


def finalize(store: FeatureStore, **levels: int) -> int:
    current = store.read()
    return store.write(
        {**current.levels, **{k.replace("_", "."): v for k, v in levels.items()}}, current.epoch
    )


# --------------------------------------------------------------------------------------


def test_both_gateways_register_and_serve_the_finalized_levels(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    a = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-a", CATALOGUE_A)
    b = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-b", CATALOGUE_B)
    registered = wait_for(
        lambda: (
            {r.gateway_id: r for r in store.registrations()}
            if len(store.registrations()) == 2
            else None
        ),
        what="both registrations",
    )
    assert registered["gw-a"].features == {FEATURE: (0, 2)}
    assert registered["gw-b"].features == {FEATURE: (0, 1)}
    assert registered["gw-a"].listener == a.bootstrap
    assert registered["gw-a"].metrics_url == a.metrics_url
    assert registered["gw-a"].upstream

    before, keys = features_of(a)
    assert before.epoch == -1 and before.finalized == {}
    assert keys[DESCRIBE_CLUSTER] == (0, 0), "v1 is withheld until test.version 1"
    # ApiVersions v4 lists supported features with min 0; v3 must leave them out.
    assert before.supported == {FEATURE: (0, 2)}
    with KafkaConnection(a.host, a.port) as conn:
        assert parse_features(conn.api_versions(3)).supported == {}

    epoch = finalize(store, test_version=1)
    for gw in (a, b):
        seen = wait_for(
            lambda gw=gw: features_of(gw) if features_of(gw)[0].epoch == epoch else None,
            what=f"{gw.name} serving epoch {epoch}",
        )
        assert seen[0].finalized == {FEATURE: (1, 1)}
        assert seen[1][DESCRIBE_CLUSTER] == (0, 1)
        assert metric(gw, "kafka_gateway_feature_finalized_epoch") == epoch
        assert metric(gw, "kafka_gateway_feature_finalized_level") == 1


def test_a_withheld_version_is_rejected_on_the_wire_and_allowed_after_finalize(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    gw = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-a")
    with KafkaConnection(gw.host, gw.port) as conn:
        conn.api_versions(3)
        assert describe_cluster_v1(conn) == UNSUPPORTED_VERSION
        assert rejected(gw, "gated_by_feature") == 1
        gw.wait_for_log(r'"needs_feature": "test.version>=1"')

        epoch = finalize(store, test_version=1)
        wait_for(lambda: features_of(gw)[0].epoch == epoch, what="new epoch")
        # The same connection: clients re-read ApiVersions only when they reconnect,
        # but the gateway enforces the new levels on every connection at once.
        assert describe_cluster_v1(conn) == 0

        store.write({}, epoch)  # disable again: withheld again
        wait_for(lambda: features_of(gw)[0].epoch == epoch + 1, what="disable")
        # This connection had v1: drained (nothing in flight, so closed at once), for
        # its client to reconnect and be offered v0 (gateway/server/withdrawn.py).
        with pytest.raises((ConnectionClosed, OSError)):
            describe_cluster_v1(conn)
    with KafkaConnection(gw.host, gw.port) as conn:
        assert conn.api_versions(3).api_keys[DESCRIBE_CLUSTER] == (0, 0)
        assert describe_cluster_v1(conn) == UNSUPPORTED_VERSION


def test_gateway_refuses_to_start_against_levels_it_cannot_serve(
    zookeeper: ZooKeeperProcess, store: FeatureStore, tmp_path: Path, broker: Any
) -> None:
    store.write({FEATURE: 2}, -1)
    result = subprocess.run(
        [
            sys.executable, "-m", "gateway",
            "--listen", "127.0.0.1:0",
            "--upstream", broker.bootstrap,
            "--advertised-host", "127.0.0.1",
            "--zookeeper", zookeeper.connect_string,
            "--zookeeper-chroot", CHROOT,
            "--features-catalogue", catalogue(tmp_path, "b", CATALOGUE_B),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    # Once, whatever the worker count (the default: the CPUs here): the supervisor
    # checks before any worker starts.
    assert result.stderr.count("refusing to start") == 1
    assert '"worker"' not in result.stderr
    assert "test.version finalized at level 2, supported 0-1" in result.stderr
    assert store.registrations() == []


def test_levels_beyond_support_at_run_time_make_the_gateway_unhealthy_until_fixed(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    b = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-b", CATALOGUE_B)
    # Ready only once registered in ZooKeeper, a moment after the port accepts.
    wait_for(lambda: http_status(b, "/readyz") == 200, what="ready")
    assert http_status(b, "/healthz") == 200
    # Someone bypasses featurectl's checks and writes a level gw-b cannot serve.
    epoch = store.write({FEATURE: 2}, -1)
    wait_for(lambda: http_status(b, "/healthz") == 503, what="unhealthy")
    assert http_status(b, "/readyz") == 503
    assert metric(b, "kafka_gateway_healthy") == 0
    b.wait_for_log("features.incompatible")
    with pytest.raises((ConnectionRefusedError, ConnectionClosed, OSError)):
        KafkaConnection(b.host, b.port, timeout=2).api_versions(0)

    store.write({FEATURE: 1}, epoch)
    wait_for(lambda: http_status(b, "/healthz") == 200, what="healthy again")
    wait_for(lambda: features_of(b)[0].finalized == {FEATURE: (1, 1)}, what="accepting again")


def test_a_registration_lost_with_its_connection_is_retried_when_the_session_resumes(
    zookeeper: ZooKeeperProcess, store: FeatureStore, tmp_path: Path
) -> None:
    """The gateway registers once it knows its support; if ZooKeeper drops during that
    call, the registration must follow on reconnect even though the session survives
    (only a new session used to trigger it). Seen in CI: ZooKeeper stopped between a
    gateway's start and its registration, and the gateway never registered.

    In process, to hit that window on purpose: the first ``register`` raises
    ConnectionLoss (fault injection; the real race is a few milliseconds wide). The
    outage and the reconnect that follow are real.
    """
    from kazoo.exceptions import ConnectionLoss

    from gateway.config import load_config
    from gateway.features.znode import Registration
    from gateway.observability.metrics import Metrics
    from gateway.server.features import FeatureGate

    config = load_config(
        overrides={
            "listen": "127.0.0.1:1",
            "upstream": "127.0.0.1:2",
            "zookeeper": zookeeper.connect_string,
            "zookeeper_chroot": CHROOT,
            # Long enough that the session outlives the ZooKeeper restart below (a JVM
            # start: 14 s once on a loaded 2-core CI box, which lost a 12 s session and
            # with it the point of the test), short enough that a reconnect attempt
            # caught by the restarting server (kazoo waits a session timeout for its
            # answer; seen in CI) leaves time for the next one within the wait below.
            "zookeeper_timeout_s": 20.0,
            "features_catalogue": catalogue(tmp_path, "a", CATALOGUE_A),
        }
    )

    async def scenario() -> None:
        gate: FeatureGate

        def registration() -> Registration:
            return Registration("gw-r", "127.0.0.1:1", "127.0.0.1:2", gate.supported or {})

        gate = FeatureGate(config, Metrics(), lambda: None, registration)
        await gate.start()
        session = gate.session
        assert session.store is not None and session.client is not None
        real_register = session.store.register
        calls: list[Registration] = []

        def flaky(reg: Registration) -> None:
            calls.append(reg)
            if len(calls) == 1:
                raise ConnectionLoss()
            real_register(reg)

        session.store.register = flaky  # type: ignore[method-assign]
        client_id = session.client.client_id
        try:
            # Learning the upstream's versions is what makes the gateway register.
            gate.set_available("127.0.0.1:2", {3: (0, 12), 18: (0, 3), 60: (0, 1)})
            await _until(lambda: len(calls) == 1, "the failed registration")
            assert store.registrations() == []

            zookeeper.stop()
            await _until(lambda: not session.connected, "disconnect seen")
            zookeeper.start()
            await _until(
                lambda: [r.gateway_id for r in store.registrations()] == ["gw-r"],
                "registration after reconnect",
                timeout=60,
            )
            assert session.client.client_id == client_id  # resumed, not a new session
            assert len(calls) == 2
        finally:
            await gate.stop()

    asyncio.run(scenario())


async def _until(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if await asyncio.get_running_loop().run_in_executor(None, check):
                return
        except Exception:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_zookeeper_outage_keeps_serving_the_last_levels_and_the_gateway_registers_again(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    epoch = store.write({FEATURE: 1}, -1)
    gw = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-a")
    wait_for(lambda: features_of(gw)[0].epoch == epoch, what="initial levels")

    zookeeper.stop()
    wait_for(lambda: metric(gw, "kafka_gateway_zookeeper_connected") == 0, what="disconnect seen")
    time.sleep(1.0)
    staleness = metric(gw, "kafka_gateway_zookeeper_staleness_seconds")
    assert staleness is not None and staleness >= 1.0
    features, _ = features_of(gw)  # traffic keeps flowing with the last levels
    assert features.epoch == epoch and features.finalized == {FEATURE: (1, 1)}
    with KafkaConnection(gw.host, gw.port) as conn:
        assert describe_cluster_v1(conn) == 0
    assert http_status(gw, "/healthz") == 200

    zookeeper.start()
    wait_for(
        lambda: metric(gw, "kafka_gateway_zookeeper_connected") == 1, timeout=30, what="reconnect"
    )
    assert metric(gw, "kafka_gateway_zookeeper_staleness_seconds") == 0
    assert [r.gateway_id for r in wait_for(store.registrations, timeout=20)] == ["gw-a"]
    # The watch survived: a change made after the outage reaches the gateway.
    new_epoch = wait_for(lambda: _retry_write(store, {}), timeout=20, what="write") - 1
    wait_for(lambda: features_of(gw)[0].epoch == new_epoch, what="watch still fires")


def test_an_expired_session_registers_again_and_rereads_the_levels(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    config = tmp_path / "zk.toml"
    config.write_text("zookeeper_timeout_s = 4.0\n")  # ZooKeeper's minimum with tickTime 2s
    gw = start_gateway(
        gateway_factory, zookeeper, tmp_path, "gw-a", CATALOGUE_A, "--config", str(config)
    )
    first = wait_for(store.registrations, what="registration")[0]
    # Freeze the gateway (a long GC pause, a partition): ZooKeeper expires its session
    # and deletes its ephemeral registration. A real part cannot be told to do this.
    assert gw.pid is not None
    os.kill(gw.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: store.registrations() == [], timeout=30, what="session expiry")
        epoch = store.write({FEATURE: 1}, store.read().epoch)  # missed while frozen
    finally:
        os.kill(gw.pid, signal.SIGCONT)
    again = wait_for(store.registrations, timeout=30, what="registration again")
    assert [r.gateway_id for r in again] == ["gw-a"]
    assert again[0].timestamp_ms >= first.timestamp_ms
    wait_for(lambda: features_of(gw)[0].epoch == epoch, what="levels re-read")
    gw.wait_for_log('"state": "LOST"')


def _retry_write(store: FeatureStore, levels: dict[str, int]) -> int | None:
    try:
        current = store.read()
        return store.write(levels, current.epoch) + 1  # +1: epoch 0 is falsy for wait_for
    except Exception:
        return None


def update_features(gw: GatewayProcess, level: int, upgrade_type: int = 1) -> Any:
    request = UpdateFeaturesRequest(
        feature_updates=(
            FeatureUpdateKey(feature=FEATURE, max_version_level=level, upgrade_type=upgrade_type),
        ),
        validate_only=False,
    )
    with KafkaConnection(gw.host, gw.port) as conn:
        conn.api_versions(3)
        return conn.request_entity(request)


def test_update_features_through_the_gateway_is_refused_by_default(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    gw = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-a")
    response = update_features(gw, 1)
    assert int(response.error_code) == 31  # CLUSTER_AUTHORIZATION_FAILED
    assert [int(r.error_code) for r in response.results] == [31]
    assert store.read() == Finalized({}, -1)


def test_update_features_from_an_allowed_address_uses_featurectls_validation(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    config = tmp_path / "allow.toml"
    config.write_text('[features]\nupdate_allowed_from = ["127.0.0.0/8"]\n')
    gw = start_gateway(
        gateway_factory, zookeeper, tmp_path, "gw-a", CATALOGUE_A, "--config", str(config)
    )
    wait_for(lambda: store.registrations(), what="registration")

    response = update_features(gw, 1)
    assert int(response.error_code) == 0
    assert [(r.feature, int(r.error_code)) for r in response.results] == [(FEATURE, 0)]
    assert store.read().levels == {FEATURE: 1}
    # Kafka answers once its own cache has the new epoch: so does the gateway.
    assert features_of(gw)[0].finalized == {FEATURE: (1, 1)}

    response = update_features(gw, 3)  # beyond what gw-a supports
    assert [int(r.error_code) for r in response.results] == [42]
    assert "gw-a (supports 0-2)" in response.results[0].error_message

    response = update_features(gw, 0, upgrade_type=1)  # delete without the downgrade flag
    assert [int(r.error_code) for r in response.results] == [42]
    assert "allowDowngrade" in response.results[0].error_message
    assert store.read().levels == {FEATURE: 1}

    response = update_features(gw, 0, upgrade_type=2)
    assert [int(r.error_code) for r in response.results] == [0]
    assert store.read().levels == {}


def featurectl(zookeeper: ZooKeeperProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "featurectl", *args[:1], "--zookeeper", zookeeper.connect_string,
         "--chroot", CHROOT, *args[1:]],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip


def test_featurectl_with_two_real_gateways(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    """The operator's path end to end: describe, a finalize the older gateway blocks, a
    finalize both can serve, a downgrade refused without its flag, then allowed."""
    a = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-a", CATALOGUE_A)
    b = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-b", CATALOGUE_B)
    wait_for(lambda: len(store.registrations()) == 2, what="both registrations")

    described = featurectl(zookeeper, "describe", "--output", "json")
    assert described.returncode == 0, described.stderr
    assert "gw-b" in described.stdout  # LimitedBy: gw-b holds test.version at 1

    blocked = featurectl(zookeeper, "finalize", "--feature", f"{FEATURE}=2")
    assert blocked.returncode == 1
    assert "gw-b (supports 0-1)" in blocked.stderr
    assert store.read() == Finalized({}, -1)

    done = featurectl(zookeeper, "finalize", "--feature", f"{FEATURE}=1")
    assert done.returncode == 0, done.stderr
    assert "-1 → 0" in done.stdout or "- → 0" in done.stdout
    for gw in (a, b):
        wait_for(lambda gw=gw: features_of(gw)[0].finalized == {FEATURE: (1, 1)}, what=gw.name)
        assert features_of(gw)[0].epoch == 0

    refused = featurectl(zookeeper, "downgrade", "--feature", f"{FEATURE}=0")
    assert refused.returncode in (1, 2)
    assert "--allow-downgrade" in refused.stderr
    assert store.read().levels == {FEATURE: 1}

    allowed = featurectl(zookeeper, "disable", "--feature", FEATURE, "--allow-downgrade")
    assert allowed.returncode == 0, allowed.stderr
    for gw in (a, b):
        wait_for(lambda gw=gw: features_of(gw)[0].epoch == 1, what=f"{gw.name} epoch 1")
        assert features_of(gw)[0].finalized == {}


def test_sigterm_deregisters_at_once(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    """A stopping gateway removes its registration itself instead of leaving it to the
    session timeout, so featurectl stops counting it at once."""
    start_gateway(gateway_factory, zookeeper, tmp_path, "gw-a")
    b = start_gateway(gateway_factory, zookeeper, tmp_path, "gw-b", CATALOGUE_B)
    wait_for(lambda: len(store.registrations()) == 2, what="both registrations")
    assert b.stop() == 0
    # Well inside the 10 s session timeout: the node was deleted, not expired.
    assert [r.gateway_id for r in store.registrations()] == ["gw-a"]
    b.wait_for_log("features.deregistered")
