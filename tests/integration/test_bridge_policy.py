"""The version bridge's policy with real clients: ``cap`` rules (kafka-python pinned to
0.10.1 and capped at 0.10.0 speaks 0.10.0's versions; librdkafka capped per API speaks
no higher) and a ``principal`` rule whose principal comes from a SASL login (Kafka 4.4
with SASL, test_sasl_principals' broker), on which the delegation-token v0s, which need
such a login, are bridged too."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.conftest import GatewayFactory
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.integration.secure_kafka import (
    OP_TIMEOUT_S,
    PASSWORD,
    USER,
    SecureKafka,
    create_scram_user,
    sasl_driver,
)
from tests.integration.test_bridge import assert_refused, bridging, metrics_text, old_client
from tests.integration.test_clients import DRIVERS
from tests.integration.test_sasl_principals import assert_no_secret, lines, secure_kafka

__all__ = ["secure_kafka"]  # test_sasl_principals' module fixture, used here by name

LEGACY = "legacy"
LEGACY_PASSWORD = "legacy-s3cr3t-pw"


def _bridged_from(text: str, api: str, version: int) -> float:
    prefix = f'kafka_gateway_bridged_requests_total{{api="{api}",from_version="{version}"'
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


def _capped_answers(text: str) -> float:
    line = next(
        line
        for line in text.splitlines()
        if line.startswith("kafka_gateway_bridge_capped_answers_total ")
    )
    return float(line.split()[1])


def _versions_sent(text: str, api: str) -> set[str]:
    """The versions of ``api`` the gateway received (kafka_gateway_requests_total)."""
    found = set()
    for line in text.splitlines():
        if line.startswith("kafka_gateway_requests_total{") and f'api="{api}"' in line:
            found.add(line.split('api_version="', 1)[1].split('"', 1)[0])
    return found


# kafka-python pinned to an api_version takes the broker's ranges only where they read
# as an older broker than the pin (it infers a release from them, as a whole: Metadata
# v2 says 0.10.1), and never below 0.10.0: a release cap moves it, so the client is
# pinned to 0.10.1 here, where it speaks Produce v2, Fetch v3 and ListOffsets v1.
PINNED = (0, 10, 1)


def test_a_release_cap_holds_an_old_client_to_that_releases_versions(
    gateway_factory: GatewayFactory,
    apache_kafka: ApacheKafkaBroker,
    unique_topic: str,
    tmp_path: Path,
) -> None:
    policy = 'policy = ["client_id=^capped- -> cap 0.10.0"]'
    gw = bridging(gateway_factory, apache_kafka, tmp_path, policy)
    DRIVERS[0].create_topic(gw.bootstrap, unique_topic)
    sent = [(b"k%d" % i, b"capped-%d" % i) for i in range(20)]
    capped = old_client(PINNED, client_id="capped-1")
    assert capped.produce_records(gw.bootstrap, unique_topic, sent) == 20
    got = capped.consume_records(gw.bootstrap, unique_topic, 20, linger_s=1.0)
    assert [(k, v) for _, k, v in got] == sent
    text = metrics_text(gw)
    # Kafka 0.10.0's broker: Fetch v2 at most, ListOffsets v0 (both bridged from there).
    assert _bridged_from(text, "Fetch", 2) >= 1 and _bridged_from(text, "ListOffsets", 0) >= 1
    assert _bridged_from(text, "Fetch", 3) == 0 and _versions_sent(text, "ListOffsets") == {"0"}
    assert _capped_answers(text) >= 1
    logged = lines(gw, "bridge.versions_capped")
    assert {(line["cap"], line["client_id"]) for line in logged} == {("0.10.0", "capped-1")}
    # The same client under another client id is not capped: Fetch v3, ListOffsets v1.
    other = old_client(PINNED, client_id="app")
    assert len(other.consume_records(gw.bootstrap, unique_topic, 20, linger_s=0.5)) == 20
    text = metrics_text(gw)
    assert _bridged_from(text, "Fetch", 3) >= 1 and "1" in _versions_sent(text, "ListOffsets")


def test_an_api_cap_holds_librdkafka_to_it(
    gateway_factory: GatewayFactory,
    apache_kafka: ApacheKafkaBroker,
    unique_topic: str,
    tmp_path: Path,
) -> None:
    # librdkafka picks each API's version from the ranges it is told, one by one. A modern
    # client (ApiVersions v4) is matched by its KIP-511 software and capped too.
    policy = 'policy = ["software=confluent-kafka-python -> cap Produce=3,Fetch=4"]'
    gw = bridging(gateway_factory, apache_kafka, tmp_path, policy)
    DRIVERS[0].create_topic(gw.bootstrap, unique_topic)
    values = [b"v%d" % i for i in range(20)]
    DRIVERS[0].produce(gw.bootstrap, unique_topic, values, "all")
    assert DRIVERS[0].consume_assigned(gw.bootstrap, unique_topic, 20) == values
    text = metrics_text(gw)
    assert _versions_sent(text, "Produce") == {"3"} and _versions_sent(text, "Fetch") == {"4"}
    assert _capped_answers(text) >= 2  # one per connection
    (logged,) = {line["cap"] for line in lines(gw, "bridge.versions_capped")}
    assert logged == "Produce=3,Fetch=4"
    assert "kafka_gateway_bridged_requests_total{" not in text  # capped, nothing to bridge


def _sasl(user: str, password: str) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


def test_a_principal_rule_refuses_one_sasl_login_and_bridges_another(
    secure_kafka: SecureKafka,
    gateway_factory: GatewayFactory,
    unique_topic: str,
    tmp_path: Path,
) -> None:
    create_scram_user(secure_kafka.broker.bootstrap, LEGACY, LEGACY_PASSWORD)
    config = tmp_path / "bridge.toml"
    config.write_text(f'[bridge]\npolicy = ["principal=User:{LEGACY} -> refuse"]\n')
    gw = gateway_factory("--config", str(config), upstream=secure_kafka.sasl, metrics=True)
    # The broker advertises an unreachable host: every client goes through the gateway.
    modern = sasl_driver("confluent", "PLAIN")
    modern.create_topic(gw.bootstrap, unique_topic)
    sent = [(b"k", b"v%d" % i) for i in range(10)]
    alice = old_client((0, 10), **_sasl(USER, PASSWORD))
    assert alice.produce_records(gw.bootstrap, unique_topic, sent) == 10
    assert_refused(gw.bootstrap, unique_topic, **_sasl(LEGACY, LEGACY_PASSWORD))
    text = metrics_text(gw)
    assert _bridged_from(text, "Produce", 2) >= 1
    refused = [
        line
        for line in text.splitlines()
        if line.startswith("kafka_gateway_rejected_requests_total{")
        and 'api="Produce"' in line
        and 'api_version="2"' in line
    ]
    assert refused and float(refused[0].rsplit(" ", 1)[1]) >= 1, text
    # Both logged in: the gateway read both principals.
    logins = {line["principal"] for line in lines(gw, "sasl.authenticated")}
    assert {f"User:{USER}", f"User:{LEGACY}"} <= logins, logins
    assert modern.consume_assigned(gw.bootstrap, unique_topic, 10) == [v for _, v in sent]


def test_the_delegation_token_v0s_create_describe_renew_and_expire_a_token(
    secure_kafka: SecureKafka, gateway_factory: GatewayFactory
) -> None:
    """The four delegation-token v0s (Kafka 4 removed them), by hand over a PLAIN login
    through the gateway: a token is created, listed, renewed and expired, as v0."""
    from gateway.bridge import messages
    from gateway.protocol import api_name
    from tests.integration.test_sasl import connect, plain_login

    gw = gateway_factory(upstream=secure_kafka.sasl, metrics=True)

    def v0(conn: Any, key: int, values: dict[str, Any]) -> dict[str, Any]:
        name = api_name(key)
        body = conn.request(key, 0, messages.encode(f"{name}Request", 0, values)).body
        return messages.decode(f"{name}Response", 0, body)

    with connect(gw) as conn:
        plain_login(conn, PASSWORD)
        renewer = {"PrincipalType": "User", "PrincipalName": USER}
        created = v0(conn, 38, {"Renewers": [renewer], "MaxLifetimeMs": -1})
        assert created["ErrorCode"] == 0, created
        assert (created["PrincipalType"], created["PrincipalName"]) == ("User", USER)
        assert created["Hmac"] and created["TokenId"]
        assert created["IssueTimestampMs"] <= created["ExpiryTimestampMs"]
        # The controller made it; the broker learns of it from the metadata log shortly.
        deadline = time.monotonic() + OP_TIMEOUT_S
        while True:
            listed = v0(conn, 41, {"Owners": None})
            assert listed["ErrorCode"] == 0, listed
            found = [t for t in listed["Tokens"] if t["TokenId"] == created["TokenId"]]
            if found or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        (token,) = found
        assert token["Hmac"] == created["Hmac"] and token["Renewers"] == [renewer]
        renewed = v0(conn, 39, {"Hmac": created["Hmac"], "RenewPeriodMs": 60_000})
        assert renewed["ErrorCode"] == 0 and renewed["ExpiryTimestampMs"] > 0
        expired = v0(conn, 40, {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": -1})
        assert expired["ErrorCode"] == 0
        while True:  # likewise its expiry
            after = v0(conn, 41, {"Owners": None})
            left = [t for t in after["Tokens"] if t["TokenId"] == created["TokenId"]]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not left
    text = metrics_text(gw)
    assert _bridged_from(text, "CreateDelegationToken", 0) == 1
    assert _bridged_from(text, "DescribeDelegationToken", 0) >= 2
    assert _bridged_from(text, "RenewDelegationToken", 0) == 1
    assert _bridged_from(text, "ExpireDelegationToken", 0) == 1
    assert_no_secret(gw.log_text())  # nor the token's HMAC, the secret it carries
    assert created["Hmac"].hex() not in gw.log_text()
