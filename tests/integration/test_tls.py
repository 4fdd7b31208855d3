"""TLS on both sides of a real gateway process, with certificates made per test by trustme.

Client side: librdkafka (confluent-kafka) with security.protocol=SSL produces and
consumes through the gateway in front of Tansu; clients that do not trust the gateway's
CA, or (with client_auth = required) bring no certificate, are refused.

Upstream side: Tansu speaks plaintext only, so a real TLS terminator (socat) stands in
front of it, as a TLS-enabled broker listener would. The gateway verifies socat's
certificate against upstream_tls_ca and the expected name; a wrong CA or name fails the
upstream connection (log line and kafka_gateway_upstream_connect_errors_total) and the
gateway keeps serving. Tansu advertises an unreachable host, so clients only get
anywhere if the gateway rewrote the addresses, TLS or not.
"""

from __future__ import annotations

import logging
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import require_tool
from tests.harness import (
    LOOPBACK,
    Broker,
    GatewayProcess,
    HarnessError,
    KafkaConnection,
    ManagedProcess,
    free_port,
    port_accepts,
)
from tests.harness.kafka_wire import ConnectionClosed
from tests.integration.conftest import Pki
from tests.integration.test_clients import ConfluentDriver

OP_TIMEOUT_S = 10.0


# --------------------------------------------------------------------------------------
# Certificates, TLS clients, the TLS terminator
# --------------------------------------------------------------------------------------


def confluent(**settings: Any) -> ConfluentDriver:
    """test_clients' librdkafka driver with extra settings (security.protocol, ssl.*)."""

    class Driver(ConfluentDriver):
        def _conf(self, bootstrap: str, **extra: Any) -> dict[str, Any]:
            return super()._conf(bootstrap, **settings, **extra)

    return Driver()


def tls_connection(
    gw: GatewayProcess,
    ca: str | None,
    cert: str | None = None,
    key: str | None = None,
    server_hostname: str | None = None,
) -> KafkaConnection:
    """A raw Kafka connection wrapped in TLS (Python's ssl: independent of librdkafka);
    ``server_hostname`` (SNI, and the name the certificate must hold) defaults to the
    gateway's host."""
    ctx = ssl.create_default_context(cafile=ca)
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    conn = KafkaConnection(gw.host, gw.port, timeout=OP_TIMEOUT_S)
    conn._sock = ctx.wrap_socket(conn._sock, server_hostname=server_hostname or gw.host)
    return conn


class PortForward(ManagedProcess):
    """socat forwarding a loopback port to ``upstream`` (one child per connection), as a
    load balancer or a NodePort would."""

    listen_kind = "TCP-LISTEN"

    def __init__(self, workdir: Path, upstream: str, name: str = "socat", options: str = ""):
        super().__init__(name, workdir / f"{name}.log")
        self.port = free_port()
        self.upstream = upstream
        self.options = options

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        listen = f"{self.listen_kind}:{self.port},bind={LOOPBACK},reuseaddr,fork"
        if self.options:
            listen += f",{self.options}"
        return ["socat", "-d", listen, f"TCP:{self.upstream}"]

    def _probe_ready(self) -> bool:
        return port_accepts(LOOPBACK, self.port)


class SocatTls(PortForward):
    """socat terminating TLS in front of a plaintext broker (one child per connection)."""

    listen_kind = "OPENSSL-LISTEN"

    def __init__(self, workdir: Path, upstream: str, server_pem: str, client_ca: str | None):
        verify = f"cafile={client_ca},verify=1" if client_ca else "verify=0"
        super().__init__(workdir, upstream, "socat-tls", f"cert={server_pem},{verify}")


@pytest.fixture
def tls_terminator(tmp_path: Path, broker: Broker, pki: Pki):
    """Start socat in front of the session broker: ``tls_terminator(client_ca=None)``."""
    require_tool("socat")
    started: list[SocatTls] = []

    def start(client_ca: str | None = None) -> SocatTls:
        part = SocatTls(tmp_path, broker.bootstrap, pki.server, client_ca)
        started.append(part)
        return part.start()

    yield start
    for part in started:
        part.stop()


def connect_errors(gw: GatewayProcess, upstream: str) -> float:
    text = urllib.request.urlopen(gw.metrics_url, timeout=5).read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "kafka_gateway_upstream_connect_errors_total"
                and sample.labels.get("upstream") == upstream
            ):
                return sample.value
    return 0.0


def produce_and_consume(driver: ConfluentDriver, gw: GatewayProcess, topic: str) -> None:
    driver.create_topic(gw.bootstrap, topic)
    driver.produce(gw.bootstrap, topic, [b"over", b"tls"], acks="all")
    assert driver.consume_assigned(gw.bootstrap, topic, 2) == [b"over", b"tls"]


# --------------------------------------------------------------------------------------
# Client side
# --------------------------------------------------------------------------------------


def test_librdkafka_produces_and_consumes_over_tls(gateway_factory, pki, unique_topic):
    gw = gateway_factory("--tls-cert", pki.server)
    listening = gw.wait_for_log(r".*gateway\.listening.*").group(0)
    assert '"tls": true' in listening and '"upstream_tls": false' in listening
    driver = confluent(**{"security.protocol": "SSL", "ssl.ca.location": pki.ca})
    produce_and_consume(driver, gw, unique_topic)


def test_clients_that_do_not_trust_the_gateway_or_speak_plaintext_are_refused(gateway_factory, pki):
    gw = gateway_factory("--tls-cert", pki.server)
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_connection(gw, ca=pki.other_ca)
    errors: list[str] = []
    admin_conf = {
        "bootstrap.servers": gw.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": pki.other_ca,
        "error_cb": lambda err: errors.append(str(err)),
        "logger": logging.getLogger("tests.librdkafka"),
    }
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(admin_conf)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(1)  # error_cb runs from poll()
    assert any("certificate verify failed" in e for e in errors), errors
    plain = KafkaConnection(gw.host, gw.port, timeout=OP_TIMEOUT_S)  # no TLS at all
    with plain, pytest.raises((ConnectionClosed, TimeoutError)):
        plain.api_versions(0, timeout=5)
    # Through all of that the gateway kept serving TLS clients.
    with tls_connection(gw, ca=pki.ca) as conn:
        assert conn.api_versions(3).error_code == 0


def test_client_certificate_required(gateway_factory, pki, unique_topic):
    gw = gateway_factory(
        "--tls-cert", pki.server, "--tls-ca", pki.ca, "--tls-client-auth", "required"
    )
    # TLS 1.3 reports a missing client certificate after the handshake: on the first read.
    refused = (ssl.SSLError, ConnectionClosed, ConnectionResetError)
    with pytest.raises(refused), tls_connection(gw, ca=pki.ca) as conn:
        conn.api_versions(0, timeout=5)
    with tls_connection(gw, pki.ca, pki.client_cert, pki.client_key) as conn:
        assert conn.api_versions(3).error_code == 0
    driver = confluent(
        **{
            "security.protocol": "SSL",
            "ssl.ca.location": pki.ca,
            "ssl.certificate.location": pki.client_cert,
            "ssl.key.location": pki.client_key,
        }
    )
    produce_and_consume(driver, gw, unique_topic)
    # The verified subject is on the connection.identified line.
    gw.wait_for_log(r"(?m)^(?=.*connection\.identified)(?=.*CN=kafka-client).*$")


def test_client_certificate_requested_admits_clients_without_one(gateway_factory, pki):
    gw = gateway_factory(
        "--tls-cert", pki.server, "--tls-ca", pki.ca, "--tls-client-auth", "requested"
    )
    with tls_connection(gw, ca=pki.ca) as conn:
        assert conn.api_versions(3).error_code == 0
    with tls_connection(gw, pki.ca, pki.client_cert, pki.client_key) as conn:
        assert conn.api_versions(3).error_code == 0


def test_bad_tls_files_exit_2_naming_the_key(gateway_factory, pki):
    gw = gateway_factory("--tls-cert", pki.ca, start=False, check_exit=False)  # no key in it
    with pytest.raises(HarnessError, match="exited with code 2"):
        gw.start(timeout=15)
    assert "tls_cert" in gw.log_text() and "no PEM private key" in gw.log_text()


# --------------------------------------------------------------------------------------
# Upstream side
# --------------------------------------------------------------------------------------


def test_upstream_tls_through_a_tls_terminator(gateway_factory, tls_terminator, pki, unique_topic):
    socat = tls_terminator()
    gw = gateway_factory(
        "--upstream-tls", "--upstream-tls-ca", pki.ca, upstream=socat.address, metrics=True
    )
    produce_and_consume(ConfluentDriver(), gw, unique_topic)
    assert "upstream.probe_failed" not in gw.log_text()  # the start-up probe used TLS too
    assert connect_errors(gw, socat.address) == 0


def test_upstream_tls_server_hostname_names_the_certificate(gateway_factory, tls_terminator, pki):
    socat = tls_terminator()
    gw = gateway_factory(
        "--upstream-tls",
        "--upstream-tls-ca",
        pki.ca,
        "--upstream-tls-server-hostname",
        "broker.internal",
        upstream=socat.address,
    )
    with KafkaConnection(gw.host, gw.port, timeout=OP_TIMEOUT_S) as conn:
        assert conn.api_versions(3).error_code == 0


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("--upstream-tls-ca", "{other_ca}"), "CERTIFICATE_VERIFY_FAILED"),
        (
            ("--upstream-tls-ca", "{ca}", "--upstream-tls-server-hostname", "wrong.example"),
            "Hostname mismatch",
        ),
    ],
    ids=["wrong-ca", "wrong-hostname"],
)
def test_upstream_tls_failure_is_logged_counted_and_survived(
    gateway_factory, tls_terminator, pki, args, error
):
    socat = tls_terminator()
    resolved = [a.format(ca=pki.ca, other_ca=pki.other_ca) for a in args]
    gw = gateway_factory("--upstream-tls", *resolved, upstream=socat.address, metrics=True)
    gw.wait_for_log("upstream.probe_failed")
    for attempt in range(2):
        with KafkaConnection(gw.host, gw.port, timeout=OP_TIMEOUT_S) as conn:
            assert conn.expect_closed(timeout=OP_TIMEOUT_S), attempt
    # Each client connection (the harness's readiness probe's too) failed upstream.
    lines = [line for line in gw.log_text().splitlines() if "upstream.connect_failed" in line]
    assert len(lines) >= 2 and all(error in line for line in lines), lines
    # Counted too, with the start-up probe; ">=" because a readiness probe's connection
    # may be counted before its log line is read here.
    assert connect_errors(gw, socat.address) >= 1 + len(lines)
    assert gw.running and port_accepts(gw.host, gw.port)


def test_upstream_check_hostname_off_still_verifies_the_chain(gateway_factory, tls_terminator, pki):
    socat = tls_terminator()
    common = ("--upstream-tls", "--no-upstream-tls-check-hostname")
    name = ("--upstream-tls-server-hostname", "wrong.example")
    gw = gateway_factory(*common, "--upstream-tls-ca", pki.ca, *name, upstream=socat.address)
    with KafkaConnection(gw.host, gw.port, timeout=OP_TIMEOUT_S) as conn:
        assert conn.api_versions(3).error_code == 0
    gw = gateway_factory(*common, "--upstream-tls-ca", pki.other_ca, upstream=socat.address)
    with KafkaConnection(gw.host, gw.port, timeout=OP_TIMEOUT_S) as conn:
        assert conn.expect_closed(timeout=OP_TIMEOUT_S)


def test_upstream_mutual_tls(gateway_factory, tls_terminator, pki):
    socat = tls_terminator(client_ca=pki.ca)  # socat now requires a client certificate
    gw = gateway_factory(
        "--upstream-tls",
        "--upstream-tls-ca",
        pki.ca,
        "--upstream-tls-cert",
        pki.client_cert,
        "--upstream-tls-key",
        pki.client_key,
        upstream=socat.address,
    )
    with KafkaConnection(gw.host, gw.port, timeout=OP_TIMEOUT_S) as conn:
        assert conn.api_versions(3).error_code == 0
    without = gateway_factory("--upstream-tls", "--upstream-tls-ca", pki.ca, upstream=socat.address)
    with KafkaConnection(without.host, without.port, timeout=OP_TIMEOUT_S) as conn:
        assert conn.expect_closed(timeout=OP_TIMEOUT_S)


def test_tls_on_both_sides(gateway_factory, tls_terminator, pki, unique_topic):
    socat = tls_terminator()
    gw = gateway_factory(
        "--tls-cert",
        pki.server,
        "--upstream-tls",
        "--upstream-tls-ca",
        pki.ca,
        upstream=socat.address,
    )
    driver = confluent(**{"security.protocol": "SSL", "ssl.ca.location": pki.ca})
    produce_and_consume(driver, gw, unique_topic)
