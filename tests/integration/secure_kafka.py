"""Apache Kafka 4.4 with SASL and TLS listeners, and the client helpers that log in to it.

The parts of test_kafka_security.py that are not tests (kept apart for the 500-line
limit): one broker with the harness's PLAINTEXT (readiness probe, SCRAM set-up) and
INTERNAL/CONTROLLER listeners kept exactly as ``gateway/server/apache_kafka.py`` writes
them, plus the LISTENERS below:

* ``SASL_PLAINTEXT``: PLAIN (users in the listener's JAAS config), SCRAM-SHA-512
  (credentials created after start with AlterUserScramCredentials: KRaft keeps them in
  its metadata log) and OAUTHBEARER (Kafka's unsecured JWT validator, its default);
* ``SSL``: a trustme CA's certificate for 127.0.0.1, in PEM (KIP-651);
* ``SASL_SSL``: PLAIN and SCRAM-SHA-512 over TLS;
* ``REAUTH``: SASL_PLAINTEXT with PLAIN and ``connections.max.reauth.ms`` (KIP-368), so
  clients must re-authenticate mid-connection and expired sessions are closed.

Delegation tokens are on (``delegation.token.secret.key``).

Every listener advertises ``unreachable.invalid``: a client only gets anywhere through
the gateway's address rewriting.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
from kio.schema.metadata.v12.response import MetadataResponse
from kio.static.primitive import i8, i32
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import (
    UNREACHABLE_HOST,
    GatewayProcess,
    KafkaConnection,
    free_port,
    parse_host_port,
    port_accepts,
)
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.integration.test_clients import AIOKafkaDriver, ClientDriver, KafkaPythonDriver
from tests.integration.test_sasl import USERS
from tests.integration.test_tls import confluent

USER = "alice"
PASSWORD = USERS[USER]
PASSWORD_MECHANISMS = ["PLAIN", "SCRAM-SHA-512"]
MECHANISMS = [*PASSWORD_MECHANISMS, "OAUTHBEARER"]  # the SASL_PLAINTEXT listener's
REAUTH_MS = 2000  # the REAUTH listener's session lifetime
SCRAM_SHA_512 = 2  # the mechanism's id in (Alter|Describe)UserScramCredentials
SCRAM_ITERATIONS = 4096  # Kafka's minimum
SCRAM_READY_TIMEOUT_S = 15.0
OP_TIMEOUT_S = 15.0

JAAS = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'user_{USER}="{PASSWORD}";',
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
}
# Listener name: (security protocol, SASL mechanisms, other per-listener properties).
LISTENERS: dict[str, tuple[str, list[str], dict[str, str]]] = {
    "SASL_PLAINTEXT": ("SASL_PLAINTEXT", MECHANISMS, {}),
    "SSL": ("SSL", [], {}),
    "SASL_SSL": ("SASL_SSL", PASSWORD_MECHANISMS, {}),
    "REAUTH": ("SASL_PLAINTEXT", ["PLAIN"], {"connections.max.reauth.ms": str(REAUTH_MS)}),
}


# --------------------------------------------------------------------------------------
# The broker
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SecureKafka:
    """The broker and the loopback addresses of its LISTENERS."""

    broker: ApacheKafkaBroker
    addresses: dict[str, str]  # listener name (LISTENERS) -> 127.0.0.1:port
    ca: str  # the CA that signed the broker's certificate (PEM file)
    other_ca: str  # a CA that signed nothing here
    keystore: str  # the broker's key and chain (PEM), for a gateway's TLS listener too

    @property
    def sasl(self) -> str:
        """The SASL_PLAINTEXT listener, where most scenarios log in."""
        return self.addresses["SASL_PLAINTEXT"]


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
    """The broker properties that add ``ports``' LISTENERS to ``base``
    (KafkaNode.broker_properties(), whose own listeners stay as written)."""
    props = {
        "listeners": base["listeners"]
        + "".join(f",{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "advertised.listeners": base["advertised.listeners"]
        + "".join(f",{name}://{UNREACHABLE_HOST}:{port}" for name, port in ports.items()),
        "listener.security.protocol.map": base["listener.security.protocol.map"]
        + "".join(f",{name}:{LISTENERS[name][0]}" for name in ports),
        # Delegation tokens on (KIP-48): a SASL login may create them.
        "delegation.token.secret.key": "kafka-gateway-tests-token-secret",
    }
    for name in ports:
        protocol, mechanisms, extra = LISTENERS[name]
        prefix = f"listener.name.{name.lower()}."
        props |= {prefix + key: value for key, value in extra.items()}
        if mechanisms:
            props[prefix + "sasl.enabled.mechanisms"] = ",".join(mechanisms)
        for mechanism in mechanisms:
            props[f"{prefix}{mechanism.lower()}.sasl.jaas.config"] = JAAS[mechanism]
        if protocol.endswith("SSL"):
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


@contextmanager
def started_secure_kafka(workdir: Path) -> Iterator[SecureKafka]:
    """Apache Kafka 4.4 with the LISTENERS above, the SCRAM user created; stopped after."""
    keystore, ca, other_ca = write_broker_pki(workdir)
    ports = {name: free_port() for name in LISTENERS}
    kafka = ApacheKafkaBroker(workdir, name="kafka-security")
    # The added listeners extend the node's own (INTERNAL/CONTROLLER ports are chosen in
    # the constructor), so the overrides are set once the node exists.
    kafka.node.properties = security_properties(kafka.node.broker_properties(), ports, keystore)
    kafka.start()
    try:
        create_scram_user(kafka.bootstrap, USER, PASSWORD)
        addresses = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
        yield SecureKafka(kafka, addresses, ca, other_ca, keystore)
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
    """test_clients' driver for ``client``, logging in as USER with ``mechanism``."""
    if client == "confluent":
        return confluent(**sasl_settings(mechanism))
    return python_driver(
        {"kafka-python": KafkaPythonDriver, "aiokafka": AIOKafkaDriver}[client], mechanism
    )


def broker_addresses(response: MetadataResponse) -> list[tuple[int, str, int]]:
    """(node id, host, port) of each broker in a Metadata answer, as the client sees it."""
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


def _samples(gw: GatewayProcess, name: str) -> Iterator[Any]:
    """The samples called ``name`` on ``gw``'s /metrics."""
    text = urllib.request.urlopen(gw.metrics_url, timeout=5).read().decode()
    for family in text_string_to_metric_families(text):
        yield from (sample for sample in family.samples if sample.name == name)


def gateway_requests(gw: GatewayProcess) -> dict[tuple[str, int], float]:
    """kafka_gateway_requests_total summed by (api, api_version)."""
    counts: dict[tuple[str, int], float] = {}
    for sample in _samples(gw, "kafka_gateway_requests_total"):
        key = (sample.labels["api"], int(sample.labels["api_version"]))
        counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def gateway_connections(gw: GatewayProcess) -> float:
    """Client connections ``gw`` accepted (kafka_gateway_connections_total)."""
    return sum(sample.value for sample in _samples(gw, "kafka_gateway_connections_total"))


def sasl_versions(gw: GatewayProcess) -> dict[str, set[int]]:
    """The SaslHandshake and SaslAuthenticate versions clients sent through ``gw``."""
    seen: dict[str, set[int]] = {"SaslHandshake": set(), "SaslAuthenticate": set()}
    for (api, version), count in gateway_requests(gw).items():
        if api in seen and count > 0:
            seen[api].add(version)
    return seen


def unsecured_jwt(lifetime_s: int = 3600) -> str:
    """An unsecured JWS for USER ("alg": "none", no signature), which Kafka's default
    OAUTHBEARER validator accepts while it has not expired (``lifetime_s`` < 0: expired)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    expires = int(time.time()) + lifetime_s
    claims = {"sub": USER, "iat": min(expires, int(time.time())) - 60, "exp": expires}
    return f"{part({'alg': 'none'})}.{part(claims)}."


def oauthbearer_initial_response(token: str) -> bytes:
    """RFC 7628's client initial response: a GS2 header, then the auth=Bearer pair."""
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()
