"""SASL and TLS against real Apache Kafka (4.4, KRaft) through the gateway (issue 30).

test_sasl.py and test_tls.py prove the gateway against a fake authenticator and a socat
TLS terminator; here Kafka's own ``SaslServerAuthenticator`` and TLS listeners stand
behind it: one broker for the module, with the listeners described in secure_kafka.py
(SASL_PLAINTEXT, SSL, SASL_SSL, REAUTH), all advertising an unreachable host. The
gateway does not terminate SASL: the broker authenticates, and tests check what a
client sees (logins, refusals, the rewritten broker list), which SASL requests went
through, and that the gateway survives every refusal without a traceback.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from tests.harness import UNREACHABLE_HOST, ConnectionClosed, KafkaConnection, parse_host_port
from tests.integration.secure_kafka import (
    MECHANISMS,
    OP_TIMEOUT_S,
    PASSWORD,
    PASSWORD_MECHANISMS,
    REAUTH_MS,
    USER,
    SecureKafka,
    assert_gateway_clean,
    broker_addresses,
    gateway_connections,
    gateway_requests,
    librdkafka_admin,
    librdkafka_refusal,
    oauthbearer_initial_response,
    sasl_driver,
    sasl_settings,
    sasl_versions,
    started_secure_kafka,
    unsecured_jwt,
)
from tests.integration.test_sasl import (
    METADATA,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    connect,
    handshake_v0,
    metadata,
    plain_login,
    raw_token,
    scram_login,
)
from tests.integration.test_tls import (
    confluent,
    connect_errors,
    produce_and_consume,
    tls_connection,
)

ILLEGAL_SASL_STATE = 34
METADATA_ALL = MetadataRequest(
    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


def plain_login_v1(conn: KafkaConnection, password: str = PASSWORD) -> SaslAuthenticateResponse:
    """SaslHandshake v1 then SaslAuthenticate v2 with a PLAIN token: Kafka's answer."""
    handshake = conn.request_entity(SaslHandshakeRequest(mechanism="PLAIN"))
    assert handshake.error_code == 0, handshake
    token = f"\0{USER}\0{password}".encode()
    return conn.request_entity(SaslAuthenticateRequest(auth_bytes=token))


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """The module's broker (secure_kafka.py): one JVM for every scenario here."""
    with started_secure_kafka(tmp_path_factory.mktemp("kafka-security")) as kafka:
        yield kafka


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


@pytest.mark.parametrize("mechanism", PASSWORD_MECHANISMS)
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


@pytest.mark.parametrize("mechanism", PASSWORD_MECHANISMS)
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
        answer = plain_login_v1(conn, "wrong")
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        assert "Invalid username or password" in (answer.error_message or "")
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


def test_oauthbearer_unsecured_jwt_raw_rounds_and_librdkafka(
    secure_kafka, gateway_factory, unique_topic
):
    gw = gateway_factory(upstream=secure_kafka.sasl, metrics=True)
    with connect(gw) as conn:  # v0, token accepted: one round, Kafka's empty token
        assert handshake_v0(conn, "OAUTHBEARER")[0] == 0
        assert raw_token(conn, oauthbearer_initial_response(unsecured_jwt())) == b""
        assert broker_addresses(metadata(conn)) == [
            (secure_kafka.broker.node_id, "127.0.0.1", gw.port)
        ]
    with connect(gw) as conn:  # v0, token refused: Kafka's error challenge adds a round
        assert handshake_v0(conn, "OAUTHBEARER")[0] == 0
        challenge = raw_token(conn, oauthbearer_initial_response(unsecured_jwt(-3600)))
        assert json.loads(challenge)["status"] == "invalid_token"
        conn.send_frame(b"\x01")  # RFC 7628's answer to a challenge: Kafka then closes
        assert conn.expect_closed(timeout=OP_TIMEOUT_S)
    oauth = {  # librdkafka's own unsecured JWT, through SaslAuthenticate
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": f"principal={USER}",
    }
    produce_and_consume(confluent(**oauth), gw, unique_topic)
    assert sasl_versions(gw)["SaslHandshake"] == {0, 1}
    assert_gateway_clean(gw)  # a \x01 read as a request would be a protocol violation


def handshakes_after_login(conn: KafkaConnection) -> list[object]:
    """Log in (v0 PLAIN), then a second SaslHandshake v0 on the same connection, its
    PLAIN token if Kafka accepted it, and a Metadata request: what came back (the
    broker count, not the addresses, which differ through the gateway by design)."""
    plain_login(conn)
    code, _ = handshake_v0(conn, "PLAIN")
    seen: list[object] = [code]
    if code == 0:
        seen.append(raw_token(conn, f"\0{USER}\0{PASSWORD}".encode()))
    return [*seen, len(metadata(conn).brokers)]


@pytest.mark.parametrize(
    ("listener", "expected"),
    [("SASL_PLAINTEXT", [ILLEGAL_SASL_STATE, 1]), ("REAUTH", [0, b"", 1])],
)
def test_handshake_after_login_gets_kafkas_answer_through_the_gateway(
    secure_kafka, gateway_factory, listener, expected
):
    # Kafka takes a new handshake as a KIP-368 re-authentication only where
    # connections.max.reauth.ms is set -- v0 included, raw tokens and all -- and
    # elsewhere answers ILLEGAL_SASL_STATE and keeps the connection. Same script, same
    # answers, straight to Kafka and through the gateway.
    host, port = parse_host_port(secure_kafka.addresses[listener])
    with KafkaConnection(host, port, timeout=OP_TIMEOUT_S) as conn:
        direct = handshakes_after_login(conn)
    gw = gateway_factory(upstream=secure_kafka.addresses[listener])
    with connect(gw) as conn:
        through = handshakes_after_login(conn)
    assert direct == through == expected
    assert_gateway_clean(gw)


def test_kip368_reauthentication_then_session_expiry(secure_kafka, gateway_factory):
    gw = gateway_factory(upstream=secure_kafka.addresses["REAUTH"])
    with connect(gw) as conn:
        for _ in range(2):  # login, then re-authentication on the same connection
            answer = plain_login_v1(conn)
            assert answer.error_code == 0
            assert answer.session_lifetime == timedelta(milliseconds=REAUTH_MS)
            assert broker_addresses(metadata(conn))[0][1:] == ("127.0.0.1", gw.port)
            time.sleep(REAUTH_MS / 2000)  # Kafka allows one re-authentication a second
        time.sleep(REAUTH_MS / 1000)  # past the session: Kafka closes on the next request
        conn.send(METADATA, 12, METADATA_ALL)
        with pytest.raises(ConnectionClosed):
            conn.recv(flexible_header=True)
    assert_gateway_clean(gw)


def test_librdkafka_reauthenticates_on_its_connections(secure_kafka, gateway_factory, unique_topic):
    from confluent_kafka import Producer

    gw = gateway_factory(upstream=secure_kafka.addresses["REAUTH"], metrics=True)
    settings = sasl_settings("PLAIN")
    confluent(**settings).create_topic(gw.bootstrap, unique_topic)
    producer = Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 0, **settings})
    counts = []
    for value in (b"before", b"after"):
        if counts:  # two sessions' worth: librdkafka re-authenticates before each expiry
            time.sleep(2 * REAUTH_MS / 1000)
        producer.produce(unique_topic, value)
        assert producer.flush(OP_TIMEOUT_S) == 0
        counts.append((gateway_requests(gw)[("SaslHandshake", 1)], gateway_connections(gw)))
    # More logins on the same connections: Kafka closed none of them for an expired session.
    (logins, connections), (later_logins, later_connections) = counts
    assert later_logins > logins and later_connections == connections, counts
    consumed = confluent(**settings).consume_assigned(gw.bootstrap, unique_topic, 2)
    assert consumed == [b"before", b"after"]
    assert_gateway_clean(gw)


# --------------------------------------------------------------------------------------
# TLS to the broker
# --------------------------------------------------------------------------------------


def test_upstream_tls_to_kafkas_ssl_listener(secure_kafka, gateway_factory, unique_topic):
    gw = gateway_factory(
        "--upstream-tls",
        "--upstream-tls-ca",
        secure_kafka.ca,
        upstream=secure_kafka.addresses["SSL"],
        metrics=True,
    )
    produce_and_consume(confluent(), gw, unique_topic)  # plaintext to the gateway
    assert "upstream.probe_failed" not in gw.log_text()
    assert connect_errors(gw, secure_kafka.addresses["SSL"]) == 0
    assert_gateway_clean(gw)


def test_upstream_tls_with_a_wrong_ca_fails_cleanly(secure_kafka, gateway_factory):
    gw = gateway_factory(
        "--upstream-tls",
        "--upstream-tls-ca",
        secure_kafka.other_ca,
        upstream=secure_kafka.addresses["SSL"],
        metrics=True,
    )
    gw.wait_for_log("upstream.probe_failed")
    for attempt in range(2):
        with connect(gw) as conn:
            assert conn.expect_closed(timeout=OP_TIMEOUT_S), attempt
    lines = [line for line in gw.log_text().splitlines() if "upstream.connect_failed" in line]
    assert len(lines) >= 2 and all("CERTIFICATE_VERIFY_FAILED" in line for line in lines), lines
    assert connect_errors(gw, secure_kafka.addresses["SSL"]) >= len(lines)
    assert_gateway_clean(gw)


@pytest.mark.parametrize(
    ("mechanism", "client_tls"),
    [("PLAIN", False), ("SCRAM-SHA-512", True)],
    ids=["SASL_PLAINTEXT-client", "SASL_SSL-client"],
)
def test_sasl_over_upstream_tls(secure_kafka, gateway_factory, unique_topic, mechanism, client_tls):
    # The gateway speaks TLS to Kafka's SASL_SSL listener; SASL passes through that leg
    # untouched, whether the client speaks plaintext or TLS (SASL_SSL) to the gateway.
    listener = ("--tls-cert", secure_kafka.keystore) if client_tls else ()
    upstream_tls = ("--upstream-tls", "--upstream-tls-ca", secure_kafka.ca)
    gw = gateway_factory(*listener, *upstream_tls, upstream=secure_kafka.addresses["SASL_SSL"])
    settings = sasl_settings(mechanism)
    if client_tls:
        settings |= {"security.protocol": "SASL_SSL", "ssl.ca.location": secure_kafka.ca}
    produce_and_consume(confluent(**settings), gw, unique_topic)
    with tls_connection(gw, secure_kafka.ca) if client_tls else connect(gw) as conn:
        scram_login(conn, "SCRAM-SHA-512")  # and raw v0 tokens over TLS
        assert broker_addresses(metadata(conn))[0][1:] == ("127.0.0.1", gw.port)
    assert_gateway_clean(gw)
