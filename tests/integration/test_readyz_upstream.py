"""/readyz reports an unreachable upstream; /healthz does not (gateway.server.upstream_watch).

A real gateway process in front of a Tansu of the test's own, which the test stops and
starts again: readiness goes 503 with the reason while the broker is down, and back to
200 without any client traffic once it answers again. With the check off
(``readiness_upstream_check_ms = 0``) readiness is the listeners only, as Kafka's own.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess, TansuBroker
from tests.integration.test_features import http_status, wait_for


def readyz(gw: GatewayProcess) -> tuple[int, str]:
    url = gw.metrics_url.replace("/metrics", "/readyz")
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def start(
    factory: GatewayFactory, broker: TansuBroker, tmp_path: Path, interval_ms: int, workers: int
) -> GatewayProcess:
    config = tmp_path / f"readyz-{interval_ms}-{workers}.toml"
    config.write_text(f"readiness_upstream_check_ms = {interval_ms}\n")
    gw = factory(
        "--config", str(config), "--workers", str(workers),
        upstream=broker.bootstrap, metrics=True,
    )  # fmt: skip
    wait_for(lambda: http_status(gw, "/readyz") == 200, what="ready")
    return gw


@pytest.mark.parametrize("workers", [1, 2])
def test_readyz_is_503_while_the_upstream_is_down_and_recovers_on_its_own(
    gateway_factory: GatewayFactory, isolated_broker: TansuBroker, tmp_path: Path, workers: int
) -> None:
    gw = start(gateway_factory, isolated_broker, tmp_path, 300, workers)
    isolated_broker.stop()
    _, why = wait_for(
        lambda: r if (r := readyz(gw))[0] == 503 else None, what="readyz 503 with the broker down"
    )
    assert f"upstream {isolated_broker.bootstrap} unreachable" in why, why
    assert http_status(gw, "/healthz") == 200  # liveness: a restart brings no broker back
    gw.wait_for_log("upstream.unreachable")
    isolated_broker.start()
    # No client connects: the gateway's own check sees the broker back.
    wait_for(lambda: readyz(gw)[0] == 200, what="readyz 200 with the broker back")
    gw.wait_for_log("upstream.reachable")


def test_readyz_is_the_listeners_only_with_the_check_off(
    gateway_factory: GatewayFactory, isolated_broker: TansuBroker, tmp_path: Path
) -> None:
    gw = start(gateway_factory, isolated_broker, tmp_path, 0, 1)
    isolated_broker.stop()
    # Long enough for a 300 ms check to have failed several times over.
    for _ in range(10):
        assert readyz(gw)[0] == 200
    assert "upstream.unreachable" not in gw.log_path.read_text()
