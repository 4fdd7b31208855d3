"""SIGHUP re-reads the TLS certificate of a real gateway process (certificates made by
trustme): an established TLS client keeps being served over its connection, a new one
sees the new certificate, and a bad file keeps the old one and is counted."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import time
from pathlib import Path

import trustme

from tests.harness.procs import GatewayProcess
from tests.integration.test_limits import PATIENCE_S, counter, served


def tls_client(gw: GatewayProcess, ca: str) -> tuple[ssl.SSLSocket, bytes]:
    """A verified TLS connection and the DER certificate the gateway presented."""
    ctx = ssl.create_default_context(cafile=ca)
    raw = socket.create_connection((gw.host, gw.port), timeout=PATIENCE_S)
    sock = ctx.wrap_socket(raw, server_hostname="localhost")
    der = sock.getpeercert(binary_form=True)
    assert der is not None
    return sock, der


def reloads(gw: GatewayProcess, result: str, count: int) -> None:
    """SIGHUP, then wait for kafka_gateway_config_reloads_total{result} to reach count."""
    assert gw.pid is not None
    os.kill(gw.pid, signal.SIGHUP)
    deadline = time.monotonic() + PATIENCE_S
    while counter(gw, "kafka_gateway_config_reloads_total", result, "result") < count:
        assert time.monotonic() < deadline, f"no {result} reload counted"
        time.sleep(0.1)


def test_sighup_rotates_the_certificate_under_live_connections(
    gateway_factory, tmp_path: Path
) -> None:
    ca = trustme.CA()
    ca_path, cert_path = str(tmp_path / "ca.pem"), tmp_path / "server.pem"
    ca.cert_pem.write_to_path(ca_path)
    first = ca.issue_cert("localhost", "127.0.0.1")
    first.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    gw = gateway_factory("--tls-cert", str(cert_path), metrics=True)

    old, old_der = tls_client(gw, ca_path)
    with old:
        assert served(old)
        second = ca.issue_cert("localhost", "127.0.0.1")
        second.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
        reloads(gw, "ok", 1)
        assert served(old)  # the established connection stays and is served
        new, new_der = tls_client(gw, ca_path)
        with new:
            assert served(new)
        assert new_der != old_der
        assert new_der == ssl.PEM_cert_to_DER_cert(second.cert_chain_pems[0].bytes().decode())

        cert_path.write_text("not a certificate\n")
        reloads(gw, "failed", 1)
        assert served(old)
        kept, kept_der = tls_client(gw, ca_path)
        with kept:
            assert served(kept)
        assert kept_der == new_der  # the bad file kept the last good certificate
    assert "gateway.reload_failed" in gw.log_path.read_text()


def test_sighup_rereads_the_feature_catalogue(gateway_factory, zookeeper, tmp_path: Path) -> None:
    catalogue = tmp_path / "features.toml"
    base = (Path(__file__).resolve().parents[2] / "conf" / "features.toml").read_text()
    catalogue.write_text(base)
    gw = gateway_factory(
        "--zookeeper",
        zookeeper.connect_string,
        "--zookeeper-chroot",
        f"/reload-{tmp_path.name}",
        "--features-catalogue",
        str(catalogue),
        metrics=True,
    )
    with socket.create_connection((gw.host, gw.port), timeout=PATIENCE_S) as live:
        assert served(live)
        catalogue.write_text(base + '\n[features."reload.test"]\nlevels.1 = []\n')
        reloads(gw, "ok", 1)
        gauge = "kafka_gateway_feature_supported_max_level"
        assert counter(gw, gauge, "reload.test", "feature") == 1
        assert served(live)

        catalogue.write_text('[features."broken"]\nlevels.2 = []\n')  # level 1 missing
        reloads(gw, "failed", 1)
        assert served(live)
    failed = [line for line in gw.log_path.read_text().splitlines() if "reload_failed" in line]
    assert failed and '"key": "features.catalogue"' in failed[0]
