"""SIGHUP re-reads the TLS certificate of a real gateway process (certificates made by
trustme): an established TLS client (raw, and a librdkafka producer) keeps being served
over its connections, a new one sees the new certificate, and a bad file keeps the old
one and is counted."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import time
from pathlib import Path

import trustme

from tests.harness.procs import GatewayProcess
from tests.integration.test_clients import ConfluentDriver
from tests.integration.test_limits import PATIENCE_S, counter, served
from tests.integration.test_tls import confluent


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


def test_an_established_librdkafka_producer_keeps_producing_across_a_rotation(
    gateway_factory, tmp_path: Path, unique_topic: str
) -> None:
    # The new certificate comes from another CA, which the established producer does not
    # trust: it can only keep delivering over the connections it already has (any new
    # one would fail verification), and a new producer that trusts only the new CA can
    # only work if the gateway hands out the new certificate.
    from confluent_kafka import KafkaError, Message, Producer

    old_ca, new_ca = trustme.CA(), trustme.CA()
    old_ca_path, new_ca_path = str(tmp_path / "old-ca.pem"), str(tmp_path / "new-ca.pem")
    old_ca.cert_pem.write_to_path(old_ca_path)
    new_ca.cert_pem.write_to_path(new_ca_path)
    cert_path = tmp_path / "server.pem"
    old_ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(cert_path)
    )
    gw = gateway_factory("--tls-cert", str(cert_path), metrics=True)
    driver = ConfluentDriver()  # for its settings (timeouts, the log to pytest)

    def producer(ca: str) -> tuple[Producer, list[Message], list[KafkaError]]:
        delivered: list[Message] = []
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered.append(msg)

        conf = driver._conf(
            gw.bootstrap,
            **{
                "security.protocol": "SSL",
                "ssl.ca.location": ca,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": int(PATIENCE_S * 1000),
                "on_delivery": on_delivery,
            },
        )
        return Producer(conf), delivered, errors

    def send(p: Producer, label: str, count: int, flush: bool = True) -> None:
        for i in range(count):
            p.produce(unique_topic, value=f"{label}-{i}".encode(), partition=0)
            p.poll(0)
        if flush:
            assert p.flush(PATIENCE_S) == 0

    admin = confluent(**{"security.protocol": "SSL", "ssl.ca.location": old_ca_path})
    admin.create_topic(gw.bootstrap, unique_topic)
    established, delivered, errors = producer(old_ca_path)
    send(established, "before", 20)
    new_ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(cert_path)
    )
    send(established, "during", 20, flush=False)  # in flight while the gateway reloads
    reloads(gw, "ok", 1)
    send(established, "after", 20)
    assert not errors, errors
    assert len(delivered) == 60
    offsets = [m.offset() for m in delivered]
    assert offsets == sorted(offsets)

    # A new librdkafka client sees (and verifies) the new certificate.
    fresh, fresh_delivered, fresh_errors = producer(new_ca_path)
    send(fresh, "fresh", 5)
    assert not fresh_errors and len(fresh_delivered) == 5
    send(established, "still", 5)  # and the established producer keeps going
    assert not errors and len(delivered) == 65


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
