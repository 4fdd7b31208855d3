"""Principals from TLS client certificates authorize UpdateFeatures; every change is audited.

A real gateway with TLS and client certificates made per test (trustme), a real
ZooKeeper holding the levels and a real Tansu behind. librdkafka connects with either
certificate (the principal only matters to UpdateFeatures); UpdateFeatures itself is
sent raw (neither librdkafka nor confluent-kafka's AdminClient has an API for it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trustme
from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest

from gateway.features.store import FeatureStore
from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess, ZooKeeperProcess
from tests.integration.conftest import CHROOT
from tests.integration.test_features import CATALOGUE_A, FEATURE, start_gateway, wait_for
from tests.integration.test_tls import confluent, produce_and_consume, tls_connection

CLUSTER_AUTHORIZATION_FAILED = 31
# Kafka's own example style: keep the CN, lower-cased; anything else as is.
RULES = "RULE:^CN=([^,]+),.*$/$1/L,DEFAULT"


class Certs:
    def __init__(self, tmp_path: Path) -> None:
        ca = trustme.CA()
        self.server = str(tmp_path / "server.pem")
        self.ca = str(tmp_path / "ca.pem")
        ca.cert_pem.write_to_path(self.ca)
        ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
            self.server
        )
        self.clients: dict[str, tuple[str, str]] = {}
        for name in ("Ops", "intruder"):
            leaf = ca.issue_cert(f"{name}.test", common_name=name, organization_name="Example")
            cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}-key.pem"
            leaf.cert_chain_pems[0].write_to_path(str(cert))
            leaf.private_key_pem.write_to_path(str(key))
            self.clients[name] = (str(cert), str(key))


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return Certs(tmp_path)


def tls_gateway(
    factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    tmp_path: Path,
    certs: Certs,
    features: str,
) -> GatewayProcess:
    config = tmp_path / "principals.toml"
    config.write_text(
        f"[tls]\nprincipal_mapping_rules = {json.dumps(RULES)}\n[features]\n{features}\n"
    )
    return start_gateway(
        factory,
        zookeeper,
        tmp_path,
        "gw-a",
        CATALOGUE_A,
        "--config",
        str(config),
        "--tls-cert",
        certs.server,
        "--tls-ca",
        certs.ca,
        "--tls-client-auth",
        "required",
    )


def update_features_as(gw: GatewayProcess, certs: Certs, who: str, level: int) -> int:
    """Top-level error code of an UpdateFeatures sent with ``who``'s certificate."""
    request = UpdateFeaturesRequest(
        feature_updates=(
            FeatureUpdateKey(feature=FEATURE, max_version_level=level, upgrade_type=1),
        ),
        validate_only=False,
    )
    with tls_connection(gw, certs.ca, *certs.clients[who]) as conn:
        conn.api_versions(3)
        return int(conn.request_entity(request).error_code)


def audit_lines(text: str) -> list[dict]:
    lines = (json.loads(line) for line in text.splitlines() if line.startswith("{"))
    return [line for line in lines if line.get("event") == "features.changed"]


def test_update_features_is_authorized_by_certificate_principal_and_audited(
    gateway_factory, zookeeper, store: FeatureStore, tmp_path, certs, unique_topic
):
    gw = tls_gateway(
        gateway_factory, zookeeper, tmp_path, certs, 'update_allowed_principals = ["User:ops"]'
    )
    wait_for(lambda: store.registrations(), what="registration")
    # Both certificates make ordinary clients: librdkafka produces and consumes with each.
    for who in ("Ops", "intruder"):
        cert, key = certs.clients[who]
        driver = confluent(
            **{
                "security.protocol": "SSL",
                "ssl.ca.location": certs.ca,
                "ssl.certificate.location": cert,
                "ssl.key.location": key,
            }
        )
        produce_and_consume(driver, gw, f"{unique_topic}-{who}")

    assert update_features_as(gw, certs, "intruder", 1) == CLUSTER_AUTHORIZATION_FAILED
    assert store.read().levels == {}
    gw.wait_for_log(r'"principal": "User:intruder".*"event": "request.update_features_refused"')

    assert update_features_as(gw, certs, "Ops", 1) == 0
    assert store.read().levels == {FEATURE: 1}
    [audit] = audit_lines(gw.log_text())
    assert audit["principal"] == "User:ops"
    assert audit["address"].startswith("127.0.0.1:")
    assert audit["via"] == "UpdateFeatures"
    assert audit["changes"] == {FEATURE: "0 -> 1"}
    assert audit["old_levels"] == {} and audit["new_levels"] == {FEATURE: 1}
    assert audit["epoch"] == "-1 -> 0"


def test_principal_and_address_must_both_match_when_both_are_configured(
    gateway_factory, zookeeper, store: FeatureStore, tmp_path, certs
):
    gw = tls_gateway(
        gateway_factory,
        zookeeper,
        tmp_path,
        certs,
        'update_allowed_principals = ["User:ops"]\nupdate_allowed_from = ["10.0.0.0/8"]',
    )
    assert update_features_as(gw, certs, "Ops", 1) == CLUSTER_AUTHORIZATION_FAILED
    gw.wait_for_log("client address is not in features.update_allowed_from")
    assert store.read().levels == {}


def test_featurectl_changes_are_audited_on_stderr(zookeeper, store: FeatureStore):
    store.write({FEATURE: 2}, -1)
    done = subprocess.run(
        [sys.executable, "-m", "featurectl", "disable", "--zookeeper",
         zookeeper.connect_string, "--chroot", CHROOT, "--feature", FEATURE,
         "--allow-downgrade", "--output", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)  # the output stays one JSON document: the audit is elsewhere
    [audit] = audit_lines(done.stderr)
    assert audit["via"] == "featurectl"
    assert audit["principal"].startswith("os:")
    assert audit["changes"] == {FEATURE: "2 -> 0"}
    assert audit["epoch"] == "0 -> 1"
