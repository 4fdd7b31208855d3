"""Who logged in: SASL principals through the gateway, against Apache Kafka 4.4 (issue 45).

Kafka's own ``SaslServerAuthenticator`` stands behind the gateway (secure_kafka.py's
broker, SASL_PLAINTEXT with PLAIN, SCRAM-SHA-512 and OAUTHBEARER; a second SCRAM user is
added here) and a real ZooKeeper holds the gateways' levels. The gateway only watches the
exchanges go by; the tests check what it makes of them where the TLS principal was used
before: UpdateFeatures authorization (featurectl --bootstrap-server as Kafka's tools
run it), the audit line, /clients and the records ``featurectl collect`` writes, the
request log, and that no password or token appears in any log, metric or record.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from featurectl import cli
from featurectl.plan.clients_dataset import read_client_rows
from gateway.features.store import FeatureStore
from tests.conftest import GatewayFactory
from tests.harness import ConnectionClosed, GatewayProcess, KafkaConnection, ZooKeeperProcess
from tests.harness.java_clients import JavaProbe
from tests.integration.secure_kafka import (
    OP_TIMEOUT_S,
    PASSWORD,
    REAUTH_MS,
    USER,
    SecureKafka,
    assert_gateway_clean,
    create_scram_user,
    oauthbearer_initial_response,
    sasl_driver,
    started_secure_kafka,
    unsecured_jwt,
)
from tests.integration.test_featurectl import assert_ok, featurectl
from tests.integration.test_features import CATALOGUE_A, FEATURE, start_gateway, wait_for
from tests.integration.test_java_clients import probe
from tests.integration.test_kafka_security import plain_login_v1
from tests.integration.test_sasl import connect, handshake_v0, plain_login, raw_token
from tests.integration.test_tls import produce_and_consume, tls_connection

OTHER = "bob"
OTHER_PASSWORD = "bob-s3cr3t-pw"
WRONG_PASSWORD = "not-alices-pw-42"
SECRETS = (PASSWORD, OTHER_PASSWORD, WRONG_PASSWORD)
SASL_AUTHENTICATION_FAILED = 58

__all__ = ["probe"]  # test_java_clients' module fixture, used here by name


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """secure_kafka.py's broker, with a second SCRAM-SHA-512 user."""
    with started_secure_kafka(tmp_path_factory.mktemp("kafka-sasl-principals")) as kafka:
        create_scram_user(kafka.broker.bootstrap, OTHER, OTHER_PASSWORD)
        yield kafka


def get_text(gw: GatewayProcess, path: str) -> str:
    url = gw.metrics_url.replace("/metrics", path)
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def lines(gw: GatewayProcess, event: str) -> list[dict[str, Any]]:
    found = (json.loads(line) for line in gw.log_text().splitlines() if line.startswith("{"))
    return [line for line in found if line.get("event") == event]


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, f"a password in: ...{text[:200]}..."
        # Nor the bearer token of the OAUTHBEARER login (its payload is base64 of JSON).
        assert "auth=Bearer" not in text and "eyJ" not in text


def command_config(tmp_path: Path, mechanism: str, user: str, password: str) -> str:
    path = tmp_path / f"{mechanism}-{user}-{len(password)}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={mechanism}\nsasl.username={user}\nsasl.password={password}\n"
    )
    return str(path)


def gated_gateway(
    factory: GatewayFactory, zookeeper: ZooKeeperProcess, tmp_path: Path, kafka: SecureKafka
) -> GatewayProcess:
    """A gateway gating CATALOGUE_A in front of the SASL_PLAINTEXT listener; only
    User:alice may change levels; every request logged."""
    config = tmp_path / "sasl.toml"
    config.write_text(
        f'[features]\nupdate_allowed_principals = ["User:{USER}"]\n[log]\nrequests = 1.0\n'
    )
    return start_gateway(
        factory, zookeeper, tmp_path, "gw-a", CATALOGUE_A, "--config", str(config),
        upstream=kafka.sasl,
    )  # fmt: skip


def test_update_features_is_authorized_by_the_sasl_principal_and_audited(
    secure_kafka: SecureKafka,
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    gw = gated_gateway(gateway_factory, zookeeper, tmp_path, secure_kafka)
    wait_for(lambda: store.registrations(), what="registration")
    bootstrap = ("--bootstrap-server", gw.bootstrap)
    finalize = ("finalize", "--feature", f"{FEATURE}=1")

    # Another user logs in (the broker accepts bob) but may not change levels.
    bob = command_config(tmp_path, "SCRAM-SHA-512", OTHER, OTHER_PASSWORD)
    refused = featurectl(*bootstrap, "--command-config", bob, *finalize)
    assert refused.returncode == 1, refused.stderr
    assert f"principal User:{OTHER} is not in features.update_allowed_principals" in (
        refused.stderr
    )
    assert store.read().levels == {}
    (line,) = lines(gw, "request.update_features_refused")
    assert line["principal"] == f"User:{OTHER}"

    # alice with a wrong password: the broker refuses the login, no principal results.
    wrong = command_config(tmp_path, "SCRAM-SHA-512", USER, WRONG_PASSWORD)
    failed = featurectl(*bootstrap, "--command-config", wrong, *finalize)
    assert failed.returncode == 2, failed.stderr
    gw.wait_for_log(r'"event": "sasl.login_failed"')
    assert all("principal" not in line for line in lines(gw, "sasl.login_failed"))
    assert store.read().levels == {}

    # alice with SCRAM-SHA-512, then with PLAIN: both are User:alice, who may.
    alice = command_config(tmp_path, "SCRAM-SHA-512", USER, PASSWORD)
    assert_ok(featurectl(*bootstrap, "--command-config", alice, *finalize))
    plain = command_config(tmp_path, "PLAIN", USER, PASSWORD)
    assert_ok(
        featurectl(*bootstrap, "--command-config", plain, "upgrade", "--feature", f"{FEATURE}=2")
    )
    assert store.read().levels == {FEATURE: 2}
    audits = lines(gw, "features.changed")
    assert [(a["principal"], a["via"], a["changes"]) for a in audits] == [
        (f"User:{USER}", "UpdateFeatures", {FEATURE: "0 -> 1"}),
        (f"User:{USER}", "UpdateFeatures", {FEATURE: "1 -> 2"}),
    ]
    logged_in = {(a["principal"], a["mechanism"]) for a in lines(gw, "sasl.authenticated")}
    assert logged_in == {
        (f"User:{OTHER}", "SCRAM-SHA-512"),
        (f"User:{USER}", "SCRAM-SHA-512"),
        (f"User:{USER}", "PLAIN"),
    }
    # The request log names who sent each request once it logged in.
    completed = lines(gw, "request.completed")
    features = [c for c in completed if c.get("api") == "UpdateFeatures"]
    assert {c.get("principal") for c in features} == {f"User:{OTHER}", f"User:{USER}"}

    # /clients: featurectl's identity, with both principals; featurectl collect's rows.
    records = json.loads(get_text(gw, "/clients"))
    principals = {p["principal"] for r in records for p in r.get("principals", [])}
    assert principals == {f"User:{USER}", f"User:{OTHER}"}, records
    out = tmp_path / "dataset"
    assert cli.main(["collect", "--gateway", gw.metrics_url, "--once", "--out", str(out)]) == 0
    rows = read_client_rows(str(out))
    assert {p for row in rows for p in row["principals"]} == principals, rows

    dataset = b"".join(path.read_bytes() for path in out.rglob("*") if path.is_file())
    assert_no_secret(
        gw.log_text(),
        get_text(gw, "/metrics"),
        get_text(gw, "/clients"),
        get_text(gw, "/connections"),
        dataset.decode("latin-1"),
    )
    assert_gateway_clean(gw)


def test_live_connections_carry_their_principal_and_handshake_v0_is_read_too(
    secure_kafka: SecureKafka, gateway_factory: GatewayFactory
) -> None:
    gw = gateway_factory(upstream=secure_kafka.sasl, metrics=True)
    with connect(gw) as v0, KafkaConnection(gw.host, gw.port, timeout=OP_TIMEOUT_S) as v1:
        plain_login(v0)  # SaslHandshake v0, the raw PLAIN token
        handshake = v1.request_entity(SaslHandshakeRequest(mechanism="OAUTHBEARER"))
        assert handshake.error_code == 0
        token = oauthbearer_initial_response(unsecured_jwt())
        assert v1.request_entity(SaslAuthenticateRequest(auth_bytes=token)).error_code == 0

        def live() -> dict[str, Any] | None:
            found = {c["sasl_mechanism"]: c for c in json.loads(get_text(gw, "/connections"))}
            return found if len(found) == 2 else None

        connections = wait_for(live, what="both connections logged in")
    assert {m: (c["principal"], c["sasl_login"]) for m, c in connections.items()} == {
        "PLAIN": (f"User:{USER}", "authenticated"),
        "OAUTHBEARER": (f"User:{USER}", "authenticated"),
    }
    assert_no_secret(gw.log_text(), get_text(gw, "/connections"))
    assert_gateway_clean(gw)


def test_a_wrong_raw_v0_password_and_an_expired_token_leave_no_principal(
    secure_kafka: SecureKafka, gateway_factory: GatewayFactory
) -> None:
    gw = gateway_factory(upstream=secure_kafka.sasl, metrics=True)
    with connect(gw) as conn:
        assert handshake_v0(conn, "PLAIN")[0] == 0
        # Kafka answers a refused v0 login by closing: the gateway says so at the close.
        with pytest.raises(ConnectionClosed):
            raw_token(conn, f"\0{USER}\0{WRONG_PASSWORD}".encode())
    with KafkaConnection(gw.host, gw.port, timeout=OP_TIMEOUT_S) as conn:
        assert conn.request_entity(SaslHandshakeRequest(mechanism="OAUTHBEARER")).error_code == 0
        token = oauthbearer_initial_response(unsecured_jwt(lifetime_s=-60))
        answer = conn.request_entity(SaslAuthenticateRequest(auth_bytes=token))
        # Kafka answers an expired token with an error challenge (error 0, a JSON status).
        assert answer.error_code in (0, SASL_AUTHENTICATION_FAILED) and (
            answer.error_code or answer.auth_bytes
        )
    deadline = time.monotonic() + OP_TIMEOUT_S
    while len(lines(gw, "sasl.login_failed")) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    failed = lines(gw, "sasl.login_failed")
    assert {line["mechanism"] for line in failed} == {"PLAIN", "OAUTHBEARER"}
    assert not lines(gw, "sasl.authenticated")
    records = json.loads(get_text(gw, "/clients"))
    assert not [p for r in records for p in r.get("principals", [])], records
    assert_no_secret(gw.log_text(), get_text(gw, "/clients"))
    assert_gateway_clean(gw)


def test_over_sasl_ssl_the_login_replaces_the_certificates_principal(
    secure_kafka: SecureKafka, gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    # A client with a certificate logs in with SASL over TLS, the gateway speaking TLS to
    # Kafka's SASL_SSL listener: as in Kafka, the connection is its SASL login's.
    ca = trustme.CA()
    ca_path, cert, key = (str(tmp_path / name) for name in ("ca.pem", "c.pem", "k.pem"))
    ca.cert_pem.write_to_path(ca_path)
    leaf = ca.issue_cert("client.test", common_name="intruder")
    leaf.cert_chain_pems[0].write_to_path(cert)
    leaf.private_key_pem.write_to_path(key)
    gw = gateway_factory(
        "--tls-cert", secure_kafka.keystore, "--tls-ca", ca_path, "--tls-client-auth",
        "required", "--upstream-tls", "--upstream-tls-ca", secure_kafka.ca,
        upstream=secure_kafka.addresses["SASL_SSL"], metrics=True,
    )  # fmt: skip

    def principals() -> list[Any]:
        return [c["principal"] for c in json.loads(get_text(gw, "/connections"))]

    with tls_connection(gw, secure_kafka.ca, cert, key) as conn:
        conn.api_versions(3)
        (tls,) = wait_for(principals, what="the connection")
        assert tls.startswith("User:CN=intruder,")  # the DEFAULT rule: the whole subject
        assert conn.request_entity(SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        token = f"\0{USER}\0{PASSWORD}".encode()
        assert conn.request_entity(SaslAuthenticateRequest(auth_bytes=token)).error_code == 0
        assert principals() == [f"User:{USER}"]
    assert_no_secret(gw.log_text())
    assert_gateway_clean(gw)


def test_kip368_reauthentication_keeps_the_principal_and_a_refused_one_drops_it(
    secure_kafka: SecureKafka, gateway_factory: GatewayFactory
) -> None:
    gw = gateway_factory(upstream=secure_kafka.addresses["REAUTH"], metrics=True)

    def principals() -> list[Any]:
        return [c["principal"] for c in json.loads(get_text(gw, "/connections"))]

    with KafkaConnection(gw.host, gw.port, timeout=OP_TIMEOUT_S) as conn:
        assert plain_login_v1(conn).error_code == 0
        time.sleep(REAUTH_MS / 2000)  # Kafka allows one re-authentication a second
        assert plain_login_v1(conn).error_code == 0  # KIP-368: the same user again
        assert principals() == [f"User:{USER}"]
        time.sleep(REAUTH_MS / 2000)
        # Kafka refuses it and closes: the connection has no principal from then on.
        assert plain_login_v1(conn, WRONG_PASSWORD).error_code == SASL_AUTHENTICATION_FAILED
        assert principals() in ([None], [])
    assert len(lines(gw, "sasl.authenticated")) == 1
    assert not lines(gw, "sasl.principal_changed")
    gw.wait_for_log(r'"event": "sasl.login_failed"')
    assert_no_secret(gw.log_text())
    assert_gateway_clean(gw)


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "java"])
def test_each_client_logs_in_with_scram_sha_512_and_is_recorded_with_its_principal(
    secure_kafka: SecureKafka,
    gateway_factory: GatewayFactory,
    unique_topic: str,
    client: str,
    request: pytest.FixtureRequest,
) -> None:
    gw = gateway_factory(upstream=secure_kafka.sasl, metrics=True)
    if client == "java":
        probe: JavaProbe = request.getfixturevalue("probe")
        run = probe.run(
            "produce", gw.bootstrap, topic=unique_topic, count=3, partitions=1,
            sasl_mechanism="SCRAM-SHA-512", sasl_username=USER, sasl_password=PASSWORD,
        )  # fmt: skip
        assert not run.errors, run.describe()
    else:
        produce_and_consume(sasl_driver(client, "SCRAM-SHA-512"), gw, unique_topic)
    records = json.loads(get_text(gw, "/clients"))
    mine = [r for r in records if r.get("principals")]
    assert mine, records
    assert {p["principal"] for r in mine for p in r["principals"]} == {f"User:{USER}"}
    software = {r["software_name"] for r in mine}
    expected = {"confluent": "confluent-kafka-python", "java": "apache-kafka-java"}
    if client in expected:
        assert any(name.startswith(expected[client]) for name in software), software
    logged = {(a["principal"], a["mechanism"]) for a in lines(gw, "sasl.authenticated")}
    assert logged == {(f"User:{USER}", "SCRAM-SHA-512")}
    assert_no_secret(gw.log_text(), get_text(gw, "/clients"), get_text(gw, "/metrics"))
    assert_gateway_clean(gw)
