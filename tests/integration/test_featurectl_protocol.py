"""featurectl --bootstrap-server: the feature commands through real gateways.

Two real gateways (real ZooKeeper, the session's real broker) gate the same catalogue;
featurectl runs as a subprocess and talks the Kafka protocol to one of them. After each
step the ZooKeeper state is read with the test's own session, and the protocol path's
output is compared with the ZooKeeper path's for the same question (dry runs, refusals,
describe), so both paths are held to one answer.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from featurectl.cli import DOWNGRADE_REFUSED
from gateway.features.store import FeatureStore
from gateway.features.znode import Finalized
from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess, TansuBroker, ZooKeeperProcess, free_port
from tests.integration.conftest import CHROOT, Pki
from tests.integration.test_featurectl import assert_ok, featurectl
from tests.integration.test_features import start_gateway, wait_for
from tests.integration.test_sasl import USERS as SASL_USERS
from tests.integration.test_sasl import FakeSaslBroker

# group.version is one of Kafka's (so --release-version moves it); test.version is not.
# The levels gate versions the session broker (Tansu) serves, so both gateways can
# serve every level listed.
CATALOGUE = """
[features."group.version"]
levels.1 = ["DescribeCluster>=1"]

[features."test.version"]
levels.1 = ["DescribeCluster>=1"]
levels.2 = ["Metadata>=12"]
"""
ALLOW_LOCALHOST = '[features]\nupdate_allowed_from = ["127.0.0.0/8"]\n'


@pytest.fixture
def broker(tansu_broker: TansuBroker) -> TansuBroker:
    """Tansu, whatever the session's broker: these tests compare featurectl's two paths
    on the gateways' own levels, which a broker that reports features of its own (Kafka
    4.x) merges into what the Kafka path sees (tests/integration/test_kafka_features_tool.py
    compares both paths in front of Kafka)."""
    return tansu_broker


def _gateways(
    factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
    config: str,
) -> GatewayProcess:
    """Start gw-a and gw-b with ``config``; return gw-a once both are registered."""
    path = tmp_path / "gateway.toml"
    path.write_text(config)
    a, _b = (
        start_gateway(factory, zookeeper, tmp_path, name, CATALOGUE, "--config", str(path))
        for name in ("gw-a", "gw-b")
    )
    wait_for(lambda: len(store.registrations()) == 2, what="both registrations")
    return a


class Paths:
    """featurectl over ZooKeeper and over the Kafka protocol, same arguments."""

    def __init__(self, zookeeper: ZooKeeperProcess, gateway: GatewayProcess) -> None:
        self.zookeeper = ("--zookeeper", zookeeper.connect_string, "--chroot", CHROOT)
        self.bootstrap = f"{gateway.host}:{gateway.port}"

    def zk(self, *args: str) -> subprocess.CompletedProcess[str]:
        return featurectl(*args, *self.zookeeper)

    def kafka(self, *args: str) -> subprocess.CompletedProcess[str]:
        # Kafka's tools take --bootstrap-server before the command word.
        return featurectl("--bootstrap-server", self.bootstrap, *args)

    def described(self, path: str) -> list[dict[str, object]]:
        run = self.zk if path == "zk" else self.kafka
        result = run("describe", "--output", "json")
        assert_ok(result)
        return json.loads(result.stdout)["features"]

    def assert_describe_agrees(self) -> list[dict[str, object]]:
        features = self.described("kafka")
        assert features == self.described("zk")
        return features


def same_answer(
    zk: subprocess.CompletedProcess[str], kafka: subprocess.CompletedProcess[str]
) -> None:
    assert (kafka.returncode, kafka.stdout, kafka.stderr) == (zk.returncode, zk.stdout, zk.stderr)


def levels(features: list[dict[str, object]]) -> dict[str, object]:
    return {f["feature"]: f["finalized_version_level"] for f in features}  # type: ignore[misc]


def test_protocol_path_finalizes_downgrades_and_disables_like_the_zookeeper_path(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    gw = _gateways(gateway_factory, zookeeper, store, tmp_path, ALLOW_LOCALHOST)
    paths = Paths(zookeeper, gw)
    before = paths.assert_describe_agrees()
    supported = {f["feature"]: (f["supported_min_version"], f["supported_max_version"])
                 for f in before}  # fmt: skip
    assert (supported["test.version"], supported["group.version"]) == ((0, 2), (0, 1))

    # --dry-run: the gateway's ValidateOnly verdict, the same lines, nothing written.
    dry = ("finalize", "--feature", "test.version=2", "--dry-run")
    same_answer(paths.zk(*dry), kafka := paths.kafka(*dry))
    assert kafka.returncode == 0
    assert kafka.stdout == "test.version: 0 → 2\nepoch: -\n(dry run: nothing written)\n"
    assert store.read() == Finalized({}, -1)

    # A level no gateway serves: refused by both paths with the same text.
    same_answer(
        paths.zk("finalize", "--feature", "test.version=3"),
        refused := paths.kafka("finalize", "--feature", "test.version=3"),
    )
    assert refused.returncode == 1
    assert "gw-a (supports 0-2), gw-b (supports 0-2)" in refused.stderr
    assert store.read() == Finalized({}, -1)

    # upgrade (kafka-features.sh's word) writes through the gateway.
    done = paths.kafka("upgrade", "--feature", "test.version=2")
    assert_ok(done)
    assert done.stdout == "test.version: 0 → 2\nepoch: - → 0\n"
    assert store.read() == Finalized({"test.version": 2}, 0)
    assert levels(paths.assert_describe_agrees())["test.version"] == 2

    # A downgrade needs --allow-downgrade on this path too, and changes nothing without it.
    refused = paths.kafka("downgrade", "--feature", "test.version=1")
    assert (refused.returncode, refused.stderr) == (1, f"error: {DOWNGRADE_REFUSED}\n")
    dry = ("downgrade", "--feature", "test.version=1", "--allow-downgrade", "--dry-run")
    same_answer(paths.zk(*dry), paths.kafka(*dry))
    assert store.read() == Finalized({"test.version": 2}, 0)
    done = paths.kafka("downgrade", "--feature", "test.version=1", "--allow-downgrade")
    assert_ok(done)
    assert done.stdout == "test.version: 2 → 1\nepoch: 0 → 1\n"
    assert store.read() == Finalized({"test.version": 1}, 1)

    # --release-version: Kafka 4.0 ships group.version 1; the features no gateway here
    # serves (metadata.version, kraft.version, transaction.version) are skipped, noted.
    dry = ("upgrade", "--release-version", "4.0", "--dry-run")
    same_answer(paths.zk(*dry), kafka := paths.kafka(*dry))
    assert "group.version: 0 → 1" in kafka.stdout
    assert "note: metadata.version=25 skipped" in kafka.stderr
    assert store.read() == Finalized({"test.version": 1}, 1)
    assert_ok(paths.kafka("upgrade", "--release-version", "4.0"))
    assert store.read() == Finalized({"test.version": 1, "group.version": 1}, 2)

    # disable, with the JSON document of the ZooKeeper path.
    disable = ("disable", "--feature", "test.version", "--allow-downgrade")
    done = paths.kafka(*disable, "--output", "json")
    assert_ok(done)
    document = json.loads(done.stdout)
    assert document["changes"] == [{"feature": "test.version", "from": 1, "to": 0}]
    assert (document["old_epoch"], document["new_epoch"], document["ok"]) == (2, 3, True)
    assert store.read() == Finalized({"group.version": 1}, 3)
    after = levels(paths.assert_describe_agrees())
    assert (after["group.version"], after["test.version"]) == (1, 0)


def test_a_client_the_gateway_does_not_allow_gets_exit_1_with_its_error_text(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    # Allowed from an address this client does not come from.
    config = '[features]\nupdate_allowed_from = ["192.0.2.0/24"]\n'
    gw = _gateways(gateway_factory, zookeeper, store, tmp_path, config)
    paths = Paths(zookeeper, gw)
    for extra in ((), ("--dry-run",)):
        result = paths.kafka("finalize", "--feature", "test.version=1", *extra)
        assert result.returncode == 1, result
        assert result.stderr == (
            "error: test.version: UpdateFeatures through kafka-gateway is refused: client "
            "address is not in features.update_allowed_from; use featurectl\n"
        )
        assert result.stdout == ""
    assert store.read() == Finalized({}, -1)
    # Reading is not an update: describe still works for this client.
    assert levels(paths.described("kafka"))["test.version"] == 0


def test_an_unreachable_bootstrap_server_is_a_one_line_usage_error() -> None:
    address = f"127.0.0.1:{free_port()}"
    result = featurectl("describe", "--bootstrap-server", address)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: cannot connect to {address}: ")
    assert len(result.stderr.splitlines()) == 1


# -- --command-config: TLS and SASL ---------------------------------------------------


def _properties(tmp_path: Path, name: str, **props: str) -> str:
    path = tmp_path / f"{name}.properties"
    path.write_text("".join(f"{key.replace('_', '.')}={value}\n" for key, value in props.items()))
    return str(path)


def test_mutual_tls_principal_is_what_the_gateway_authorizes(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
    pki: Pki,
) -> None:
    """security.protocol=SSL with a client certificate: the gateway maps its subject to
    User:kafka-client, which may update; the same client without a certificate may not."""
    config = (
        '[tls]\nprincipal_mapping_rules = "RULE:^.*CN=([^,]+).*$/$1/,DEFAULT"\n'
        '[features]\nupdate_allowed_principals = ["User:kafka-client"]\n'
    )
    tls = ("--tls-cert", pki.server, "--tls-ca", pki.ca, "--tls-client-auth", "requested")
    path = tmp_path / "gateway.toml"
    path.write_text(config)
    gw = start_gateway(
        gateway_factory, zookeeper, tmp_path, "gw-a", CATALOGUE, "--config", str(path), *tls
    )
    wait_for(lambda: store.registrations(), what="registration")
    bootstrap = ("--bootstrap-server", f"localhost:{gw.port}")
    with_cert = _properties(
        tmp_path,
        "with-cert",
        security_protocol="SSL",
        ssl_ca_location=pki.ca,
        ssl_certificate_location=pki.client_cert,
        ssl_key_location=pki.client_key,
    )
    without_cert = _properties(tmp_path, "no-cert", security_protocol="SSL",
                               ssl_ca_location=pki.ca)  # fmt: skip
    update = ("finalize", "--feature", "test.version=1")

    refused = featurectl(*bootstrap, "--command-config", without_cert, *update)
    assert refused.returncode == 1
    assert "principal User:ANONYMOUS is not in features.update_allowed_principals" in (
        refused.stderr
    )
    assert store.read() == Finalized({}, -1)

    done = featurectl(*bootstrap, "--command-config", with_cert, *update)
    assert_ok(done)
    assert store.read() == Finalized({"test.version": 1}, 0)

    # Not trusting the gateway's CA is a connection failure (exit 2), not a refusal.
    untrusting = _properties(tmp_path, "other-ca", security_protocol="SSL",
                             ssl_ca_location=pki.other_ca)  # fmt: skip
    failed = featurectl(*bootstrap, "--command-config", untrusting, "describe")
    assert failed.returncode == 2
    assert failed.stderr.startswith(f"error: TLS handshake with localhost:{gw.port} failed")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_login_through_the_gateway_with_command_config(
    gateway_factory: GatewayFactory, tmp_path: Path, mechanism: str
) -> None:
    """SASL_PLAINTEXT: featurectl logs in (the gateway passes SASL to the broker, a
    SASL-only fake here, as Tansu has none) before describing; a wrong password is a
    connection failure naming the broker's reason."""
    broker = FakeSaslBroker(handshake_max=1)
    try:
        gw = gateway_factory(upstream=broker.address)
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="alice" password="{SASL_USERS["alice"]}";'
        )
        good = _properties(tmp_path, "good", security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism=mechanism, sasl_jaas_config=jaas)  # fmt: skip
        bad = _properties(tmp_path, "bad", security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism=mechanism, sasl_username="alice",
                          sasl_password="wrong")  # fmt: skip
        bootstrap = ("--bootstrap-server", f"127.0.0.1:{gw.port}")

        assert_ok(featurectl(*bootstrap, "--command-config", good, "describe"))
        (session,) = broker.authenticated_sessions()
        assert (session.handshakes, session.logins) == ([(1, mechanism)], ["alice"])

        failed = featurectl(*bootstrap, "--command-config", bad, "describe")
        assert failed.returncode == 2
        assert failed.stderr.startswith(f"error: SASL authentication with 127.0.0.1:{gw.port}")
        assert len(broker.authenticated_sessions()) == 1
    finally:
        broker.close()


def test_a_misspelt_feature_through_a_gateway_is_a_usage_error_that_suggests_the_known_one(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    """As over ZooKeeper: refused before any UpdateFeatures, exit 2, the closest name
    (the answering gateway's supported features count as known: test.version is only in
    its catalogue)."""
    gw = _gateways(gateway_factory, zookeeper, store, tmp_path, ALLOW_LOCALHOST)
    paths = Paths(zookeeper, gw)
    for args in [
        ("describe", "--feature", "test.verison"),
        ("finalize", "--feature", "test.verison=1"),
        ("upgrade", "--feature", "test.verison=1", "--dry-run"),
        ("downgrade", "--feature", "test.verison=0", "--allow-downgrade"),
        ("disable", "--feature", "test.verison", "--allow-downgrade"),
    ]:
        result = paths.kafka(*args)
        assert (result.returncode, result.stdout) == (2, ""), result
        error, known = result.stderr.removesuffix("\n").split("; known features: ")
        assert error == "error: unknown feature test.verison (did you mean test.version?)"
        assert {"group.version", "test.version"} <= set(known.split(", "))
        assert paths.zk(*args).stderr == result.stderr, args  # both paths know the same
    assert store.read() == Finalized({}, -1)


def test_brokers_with_bootstrap_server_lists_what_metadata_advertises(
    gateway_factory: GatewayFactory,
    zookeeper: ZooKeeperProcess,
    store: FeatureStore,
    tmp_path: Path,
) -> None:
    """featurectl brokers --bootstrap-server: the brokers a Metadata request through the
    gateway lists (a sidecar gateway advertises itself), each asked for its software as
    --bootstrap does; before or after the command word."""
    gw = _gateways(gateway_factory, zookeeper, store, tmp_path, ALLOW_LOCALHOST)
    bootstrap = f"{gw.host}:{gw.port}"
    explicit = featurectl("brokers", "--bootstrap", bootstrap, "--output", "json")
    assert_ok(explicit)
    for argv in (
        ("--bootstrap-server", bootstrap, "brokers", "--output", "json"),
        ("brokers", "--bootstrap-server", bootstrap, "--output", "json"),
    ):
        listed = featurectl(*argv)
        assert_ok(listed)
        assert listed.stdout == explicit.stdout
    assert [row["address"] for row in json.loads(explicit.stdout)] == [bootstrap]
    table = featurectl("--bootstrap-server", bootstrap, "brokers")
    assert_ok(table)
    assert table.stdout.splitlines()[0].split() == [
        "Gateway",
        "BrokerSoftwareName",
        "BrokerSoftwareVersion",
    ]
    assert table.stdout.splitlines()[1].split()[0] == bootstrap
    unreachable = f"127.0.0.1:{free_port()}"
    refused = featurectl("--bootstrap-server", unreachable, "brokers")
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"error: cannot connect to {unreachable}: ")
