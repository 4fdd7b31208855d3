"""SASL and TLS against real Apache Kafka (4.4, KRaft) through the gateway (issue 30).

test_sasl.py and test_tls.py prove the gateway against a fake authenticator and a socat
TLS terminator; this module puts Kafka's own ``SaslServerAuthenticator`` and its own TLS
listener behind the gateway. One broker serves the whole module, with the harness's
PLAINTEXT (readiness probe, SCRAM set-up) and INTERNAL/CONTROLLER listeners kept exactly
as ``gateway/server/apache_kafka.py`` writes them, plus:

* ``SASL_PLAINTEXT``: PLAIN (users in the listener's JAAS config) and SCRAM-SHA-512
  (credentials created after start with AlterUserScramCredentials, as KRaft keeps them
  in its metadata log);
* ``SSL``: a per-module trustme CA's certificate for 127.0.0.1, in PEM (KIP-651);
* ``SASL_SSL``: both at once.

Every listener advertises ``unreachable.invalid``, so a client only gets anywhere
through the gateway's address rewriting. The gateway does not terminate SASL: the
broker authenticates, and tests check what a client sees (logins, refusals, the
rewritten broker list) and that the gateway survives the refusals.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse
from kio.static.primitive import i8, i32
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import (
    UNREACHABLE_HOST,
    ConnectionClosed,
    GatewayProcess,
    KafkaConnection,
    free_port,
    parse_host_port,
    port_accepts,
)
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.integration.test_clients import AIOKafkaDriver, ClientDriver, KafkaPythonDriver
from tests.integration.test_sasl import (
    METADATA,
    SASL_AUTHENTICATE,
    SASL_AUTHENTICATION_FAILED,
    SASL_HANDSHAKE,
    UNSUPPORTED_SASL_MECHANISM,
    USERS,
    connect,
    handshake_v0,
    metadata,
    plain_login,
    raw_token,
    scram_login,
)
from tests.integration.test_tls import confluent, connect_errors, produce_and_consume
from tests.unit._kafka import schema_module, top_level

USER = "alice"
PASSWORD = USERS[USER]
MECHANISMS = ["PLAIN", "SCRAM-SHA-512"]
SCRAM_SHA_512 = 2  # the mechanism's id in (Alter|Describe)UserScramCredentials
SCRAM_ITERATIONS = 4096  # Kafka's minimum
ILLEGAL_SASL_STATE = 34
SCRAM_READY_TIMEOUT_S = 15.0
OP_TIMEOUT_S = 15.0
METADATA_ALL = MetadataRequest(
    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
)

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


# --------------------------------------------------------------------------------------
# The broker
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SecureKafka:
    """The module's broker and the loopback addresses of its secured listeners."""

    broker: ApacheKafkaBroker
    sasl: str  # SASL_PLAINTEXT
    ssl: str  # SSL
    sasl_ssl: str  # SASL_SSL
    ca: str  # the CA that signed the broker's certificate (PEM file)
    other_ca: str  # a CA that signed nothing here


def write_broker_pki(workdir: Path) -> tuple[str, str, str]:
    """(keystore, ca, other_ca) PEM files: Kafka's PEM keystore wants the key in PKCS#8,
    which trustme does not write (it writes the traditional OpenSSL format)."""
    ca, other = trustme.CA(), trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    key = load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    pkcs8 = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    paths = [workdir / name for name in ("broker-keystore.pem", "ca.pem", "other-ca.pem")]
    paths[0].write_bytes(pkcs8 + b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    ca.cert_pem.write_to_path(str(paths[1]))
    other.cert_pem.write_to_path(str(paths[2]))
    return str(paths[0]), str(paths[1]), str(paths[2])


def security_properties(
    base: dict[str, str], ports: dict[str, int], keystore: str
) -> dict[str, str]:
    """The broker properties that add ``ports``' listeners (name = security protocol) to
    ``base`` (KafkaNode.broker_properties(), whose own listeners stay as written)."""
    props = {
        "listeners": base["listeners"]
        + "".join(f",{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "advertised.listeners": base["advertised.listeners"]
        + "".join(f",{name}://{UNREACHABLE_HOST}:{port}" for name, port in ports.items()),
        "listener.security.protocol.map": base["listener.security.protocol.map"]
        + "".join(f",{name}:{name}" for name in ports),
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
    }
    for name in ports:
        prefix = f"listener.name.{name.lower()}."
        if name.startswith("SASL_"):
            props[prefix + "plain.sasl.jaas.config"] = (
                f'{PLAIN_MODULE} required user_{USER}="{PASSWORD}";'
            )
            props[prefix + "scram-sha-512.sasl.jaas.config"] = f"{SCRAM_MODULE} required;"
        if name.endswith("SSL"):
            props[prefix + "ssl.keystore.type"] = "PEM"
            props[prefix + "ssl.keystore.location"] = keystore
    return props


def create_scram_user(bootstrap: str, user: str, password: str) -> None:
    """Store ``user``'s SCRAM-SHA-512 credential (AlterUserScramCredentials v0, by hand:
    salt and PBKDF2 as Kafka's ScramFormatter) and wait until the broker serves it."""
    salt = os.urandom(32)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, SCRAM_ITERATIONS)
    upsert = ScramCredentialUpsertion(
        name=user,
        mechanism=i8(SCRAM_SHA_512),
        iterations=i32(SCRAM_ITERATIONS),
        salt=salt,
        salted_password=salted,
    )
    host, port = parse_host_port(bootstrap)
    with KafkaConnection(host, port, timeout=OP_TIMEOUT_S) as conn:
        altered = conn.request_entity(
            AlterUserScramCredentialsRequest(deletions=(), upsertions=(upsert,))
        )
        assert [(r.user, r.error_code) for r in altered.results] == [(user, 0)], altered
        # The controller committed it; the broker applies the metadata record shortly after.
        describe = DescribeUserScramCredentialsRequest(users=(UserName(name=user),))
        deadline = time.monotonic() + SCRAM_READY_TIMEOUT_S
        while time.monotonic() < deadline:
            (result,) = conn.request_entity(describe).results
            if result.error_code == 0 and result.credential_infos:
                return
            time.sleep(0.1)
    raise AssertionError(f"SCRAM credential of {user!r} not visible after {SCRAM_READY_TIMEOUT_S}s")


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """Apache Kafka 4.4 with SASL_PLAINTEXT, SSL and SASL_SSL listeners (module docstring)."""
    workdir = tmp_path_factory.mktemp("kafka-security")
    keystore, ca, other_ca = write_broker_pki(workdir)
    ports = {name: free_port() for name in ("SASL_PLAINTEXT", "SSL", "SASL_SSL")}
    kafka = ApacheKafkaBroker(workdir, name="kafka-security")
    # The added listeners extend the node's own (INTERNAL/CONTROLLER ports are chosen in
    # the constructor), so the overrides are set once the node exists.
    kafka.node.properties = security_properties(kafka.node.broker_properties(), ports, keystore)
    kafka.start()
    try:
        create_scram_user(kafka.bootstrap, USER, PASSWORD)
        yield SecureKafka(
            broker=kafka,
            sasl=f"127.0.0.1:{ports['SASL_PLAINTEXT']}",
            ssl=f"127.0.0.1:{ports['SSL']}",
            sasl_ssl=f"127.0.0.1:{ports['SASL_SSL']}",
            ca=ca,
            other_ca=other_ca,
        )
    finally:
        kafka.stop()


# --------------------------------------------------------------------------------------
# Clients and checks
# --------------------------------------------------------------------------------------


def sasl_settings(mechanism: str, password: str = PASSWORD) -> dict[str, Any]:
    """librdkafka's settings for a SASL login over plaintext to the gateway."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": USER,
        "sasl.password": password,
    }


def python_driver(
    base: type[KafkaPythonDriver] | type[AIOKafkaDriver], mechanism: str
) -> ClientDriver:
    """test_clients' kafka-python or aiokafka driver, logging in with ``mechanism`` (both
    take the same keyword arguments; SCRAM credentials too go in sasl_plain_*)."""
    sasl = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
    }

    class Driver(base):  # type: ignore[valid-type,misc]
        @property
        def _common(self) -> dict[str, Any]:
            return {**super()._common, **sasl}

    return Driver()


def sasl_driver(client: str, mechanism: str) -> ClientDriver:
    if client == "confluent":
        return confluent(**sasl_settings(mechanism))
    return python_driver(
        {"kafka-python": KafkaPythonDriver, "aiokafka": AIOKafkaDriver}[client], mechanism
    )


def broker_addresses(response: MetadataResponse) -> list[tuple[int, str, int]]:
    return [(int(b.node_id), b.host, int(b.port)) for b in response.brokers]


def assert_gateway_clean(gw: GatewayProcess) -> None:
    """No traceback and no protocol violation in the gateway's log; still serving."""
    log = gw.log_text()
    assert "Traceback" not in log, gw.log_tail()
    assert "connection.protocol_violation" not in log, gw.log_tail()
    assert gw.running and port_accepts(gw.host, gw.port)


def librdkafka_admin(gw: GatewayProcess, mechanism: str, password: str, errors: list[Any]) -> Any:
    """A librdkafka AdminClient logging in through ``gw``; errors go to ``errors``."""
    from confluent_kafka.admin import AdminClient

    conf = {
        "bootstrap.servers": gw.bootstrap,
        **sasl_settings(mechanism, password),
        "error_cb": errors.append,
        "logger": logging.getLogger("tests.librdkafka"),
    }
    return AdminClient(conf)


def librdkafka_refusal(gw: GatewayProcess, mechanism: str, password: str) -> list[Any]:
    """The KafkaErrors librdkafka reports (error_cb) on its first failed login via ``gw``;
    it connects on creation and retries, so wait for the first report, not a timeout."""
    errors: list[Any] = []
    admin = librdkafka_admin(gw, mechanism, password, errors)
    deadline = time.monotonic() + OP_TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        admin.poll(0.1)  # error_cb runs from poll()
    return errors


def gateway_requests(gw: GatewayProcess) -> dict[tuple[str, int], float]:
    """kafka_gateway_requests_total summed by (api, api_version), from ``gw``'s /metrics."""
    text = urllib.request.urlopen(gw.metrics_url, timeout=5).read().decode()
    counts: dict[tuple[str, int], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kafka_gateway_requests_total":
                key = (sample.labels["api"], int(sample.labels["api_version"]))
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def sasl_versions(gw: GatewayProcess) -> dict[str, set[int]]:
    """The SaslHandshake and SaslAuthenticate versions clients sent through ``gw``."""
    seen: dict[str, set[int]] = {"SaslHandshake": set(), "SaslAuthenticate": set()}
    for (api, version), count in gateway_requests(gw).items():
        if api in seen and count > 0:
            seen[api].add(version)
    return seen


# --------------------------------------------------------------------------------------
# SASL: the premise, real clients (SaslHandshake v1), raw tokens (v0), refusals
# --------------------------------------------------------------------------------------


def test_premise_kafka_authenticates_and_advertises_the_unreachable_host(secure_kafka):
    # Straight to the broker: Kafka's authenticator accepts v0 raw tokens, and what a
    # client learns from Metadata is unusable without the gateway.
    host, port = parse_host_port(secure_kafka.sasl)
    with KafkaConnection(host, port, timeout=OP_TIMEOUT_S) as conn:
        plain_login(conn)
        brokers = broker_addresses(metadata(conn))
    assert brokers == [(secure_kafka.broker.node_id, UNREACHABLE_HOST, port)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_real_clients_log_in_produce_and_consume(
    secure_kafka, gateway_factory, unique_topic, client, mechanism
):
    gw = gateway_factory(upstream=secure_kafka.sasl, metrics=True)
    produce_and_consume(sasl_driver(client, mechanism), gw, unique_topic)
    # Kafka offers SaslHandshake v1, so every client sent its tokens in SaslAuthenticate.
    versions = sasl_versions(gw)
    assert versions["SaslHandshake"] == {1} and versions["SaslAuthenticate"], versions
    assert_gateway_clean(gw)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_handshake_v0_raw_tokens_against_kafkas_authenticator(
    secure_kafka, gateway_factory, mechanism
):
    gw = gateway_factory(upstream=secure_kafka.sasl, metrics=True)
    with connect(gw) as conn:
        assert conn.api_versions(3).error_code == 0  # what clients send first
        if mechanism == "PLAIN":
            plain_login(conn)
        else:
            scram_login(conn, mechanism)
        for _ in range(2):
            assert broker_addresses(metadata(conn)) == [
                (secure_kafka.broker.node_id, "127.0.0.1", gw.port)
            ]
    assert sasl_versions(gw) == {"SaslHandshake": {0}, "SaslAuthenticate": set()}
    assert_gateway_clean(gw)


def test_handshake_v0_lists_the_listeners_mechanisms_and_refuses_others(
    secure_kafka, gateway_factory
):
    gw = gateway_factory(upstream=secure_kafka.sasl)
    with connect(gw) as conn:
        assert handshake_v0(conn, "PLAIN") == (0, MECHANISMS)
        assert raw_token(conn, f"\0{USER}\0{PASSWORD}".encode()) == b""
    with connect(gw) as conn:
        # Not enabled on the listener: Kafka answers with its list, then closes.
        assert handshake_v0(conn, "SCRAM-SHA-256") == (UNSUPPORTED_SASL_MECHANISM, MECHANISMS)
        assert conn.expect_closed(timeout=OP_TIMEOUT_S)
    with connect(gw) as conn:
        # Anything but ApiVersions/SaslHandshake before the login: Kafka closes.
        conn.send(METADATA, 12, METADATA_ALL)
        with pytest.raises(ConnectionClosed):
            conn.recv(flexible_header=True)
    assert_gateway_clean(gw)


def test_wrong_passwords_are_refused_by_kafka_and_the_gateway_serves_on(
    secure_kafka, gateway_factory
):
    from confluent_kafka import KafkaError
    from kafka.net.sasl.scram import ScramClient

    gw = gateway_factory(upstream=secure_kafka.sasl)
    with connect(gw) as conn:  # v0 PLAIN: Kafka sends nothing back and closes
        assert handshake_v0(conn, "PLAIN")[0] == 0
        conn.send_frame(f"\0{USER}\0wrong".encode())
        assert conn.expect_closed(timeout=OP_TIMEOUT_S)
    with connect(gw) as conn:  # v0 SCRAM: the final round fails
        scram = ScramClient(USER, "wrong", "SCRAM-SHA-512")
        assert handshake_v0(conn, "SCRAM-SHA-512")[0] == 0
        scram.process_server_first_message(raw_token(conn, scram.first_message()))
        conn.send_frame(scram.final_message())
        assert conn.expect_closed(timeout=OP_TIMEOUT_S)
    with connect(gw) as conn:  # v1: an error answer in SaslAuthenticate, then the close
        handshake = top_level(schema_module("sasl_handshake", 1, "request"))
        authenticate = top_level(schema_module("sasl_authenticate", 2, "request"))
        answer = conn.request(SASL_HANDSHAKE, 1, handshake(mechanism="PLAIN"))
        assert answer.body[:2] == b"\x00\x00"
        token = authenticate(auth_bytes=f"\0{USER}\0wrong".encode())
        answer = conn.request(SASL_AUTHENTICATE, 2, token)
        assert int.from_bytes(answer.body[:2], "big") == SASL_AUTHENTICATION_FAILED
        assert b"Invalid username or password" in answer.body
        assert conn.expect_closed(timeout=OP_TIMEOUT_S)
    # A real client names the failure, in Kafka's words (per mechanism's SaslServer).
    reasons = {
        "PLAIN": "Invalid username or password",
        "SCRAM-SHA-512": "invalid credentials with SASL mechanism SCRAM-SHA-512",
    }
    for mechanism, reason in reasons.items():
        errors = librdkafka_refusal(gw, mechanism, "wrong")
        assert [e.code() for e in errors][:1] == [KafkaError._AUTHENTICATION], errors
        assert reason in errors[0].str(), errors
    # Refusals closed only those connections: the next clients log in.
    with connect(gw) as conn:
        scram_login(conn, "SCRAM-SHA-512")
        assert broker_addresses(metadata(conn))[0][1:] == ("127.0.0.1", gw.port)
    errors: list[Any] = []
    listed = librdkafka_admin(gw, "PLAIN", PASSWORD, errors).list_topics(timeout=OP_TIMEOUT_S)
    assert {(b.host, b.port) for b in listed.brokers.values()} == {("127.0.0.1", gw.port)}
    assert errors == []
    assert_gateway_clean(gw)


def test_sasl_handshake_on_a_plaintext_listener_is_an_answer_not_a_close(
    secure_kafka, gateway_factory
):
    # Kafka's KafkaApis answers a SaslHandshake on a non-SASL listener with
    # ILLEGAL_SASL_STATE and keeps the connection; the gateway must not switch to raw
    # tokens on that answer (test_sasl's fake broker does not model this listener).
    gw = gateway_factory(upstream=secure_kafka.broker.bootstrap)
    with connect(gw) as conn:
        assert handshake_v0(conn, "PLAIN")[0] == ILLEGAL_SASL_STATE
        assert broker_addresses(metadata(conn)) == [
            (secure_kafka.broker.node_id, "127.0.0.1", gw.port)
        ]
    assert_gateway_clean(gw)


# --------------------------------------------------------------------------------------
# TLS to the broker
# --------------------------------------------------------------------------------------


def test_upstream_tls_to_kafkas_ssl_listener(secure_kafka, gateway_factory, unique_topic):
    gw = gateway_factory(
        "--upstream-tls",
        "--upstream-tls-ca",
        secure_kafka.ca,
        upstream=secure_kafka.ssl,
        metrics=True,
    )
    produce_and_consume(confluent(), gw, unique_topic)  # plaintext to the gateway
    assert "upstream.probe_failed" not in gw.log_text()
    assert connect_errors(gw, secure_kafka.ssl) == 0
    assert_gateway_clean(gw)


def test_upstream_tls_with_a_wrong_ca_fails_cleanly(secure_kafka, gateway_factory):
    gw = gateway_factory(
        "--upstream-tls",
        "--upstream-tls-ca",
        secure_kafka.other_ca,
        upstream=secure_kafka.ssl,
        metrics=True,
    )
    gw.wait_for_log("upstream.probe_failed")
    for attempt in range(2):
        with connect(gw) as conn:
            assert conn.expect_closed(timeout=OP_TIMEOUT_S), attempt
    lines = [line for line in gw.log_text().splitlines() if "upstream.connect_failed" in line]
    assert len(lines) >= 2 and all("CERTIFICATE_VERIFY_FAILED" in line for line in lines), lines
    assert connect_errors(gw, secure_kafka.ssl) >= len(lines)
    assert_gateway_clean(gw)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_sasl_over_upstream_tls(secure_kafka, gateway_factory, unique_topic, mechanism):
    # The client speaks SASL_PLAINTEXT to the gateway; the gateway adds TLS to Kafka's
    # SASL_SSL listener: SASL passes through the TLS leg untouched.
    gw = gateway_factory(
        "--upstream-tls", "--upstream-tls-ca", secure_kafka.ca, upstream=secure_kafka.sasl_ssl
    )
    produce_and_consume(confluent(**sasl_settings(mechanism)), gw, unique_topic)
    with connect(gw) as conn:
        scram_login(conn, "SCRAM-SHA-512")  # and raw v0 tokens over TLS
        assert broker_addresses(metadata(conn))[0][1:] == ("127.0.0.1", gw.port)
    assert_gateway_clean(gw)
