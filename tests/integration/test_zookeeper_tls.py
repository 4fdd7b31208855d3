"""The gateway and featurectl reach ZooKeeper over TLS (mutual) with SASL DIGEST-MD5.

A real ZooKeeper 3.9 (pyspark's jars) with a Netty secureClientPort whose PEM key and
trust stores are made per test by trustme, and a JAAS DigestLoginModule that requires
every session to authenticate. Its plaintext port stays open for the harness's probe
only (four-letter words); every test connection uses the TLS port.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from gateway.features.store import FeatureStore, ZooKeeperTls, make_client
from tests.harness import ZooKeeperProcess
from tests.harness.ports import free_port
from tests.integration.conftest import CHROOT
from tests.integration.test_features import CATALOGUE_A, FEATURE, catalogue, wait_for

SASL_USER, SASL_PASSWORD = "gateway", "s3cret"


class TlsZooKeeper(ZooKeeperProcess):
    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir, name="zookeeper-tls")
        self.secure_port = free_port()
        ca = trustme.CA()
        self.ca = str(workdir / "zk-ca.pem")
        ca.cert_pem.write_to_path(self.ca)
        server = ca.issue_cert("localhost", "127.0.0.1", key_type=trustme.KeyType.RSA)
        self.server_pem = str(workdir / "zk-server.pem")
        # ZooKeeper's PEM key store reads PKCS#8 keys only.
        key = serialization.load_pem_private_key(server.private_key_pem.bytes(), None)
        pkcs8 = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        Path(self.server_pem).write_bytes(
            pkcs8 + b"".join(blob.bytes() for blob in server.cert_chain_pems)
        )
        client = ca.issue_cert("featurectl.test", common_name="ops")
        self.client_cert = str(workdir / "zk-client.pem")
        self.client_key = str(workdir / "zk-client-key.pem")
        client.cert_chain_pems[0].write_to_path(self.client_cert)
        client.private_key_pem.write_to_path(self.client_key)
        self.jaas = workdir / "zk-jaas.conf"

    @property
    def secure_connect_string(self) -> str:
        return f"{self.host}:{self.secure_port}"

    def _before_start(self) -> None:
        super()._before_start()
        with self.config_path.open("a") as cfg:
            cfg.write(
                f"secureClientPort={self.secure_port}\n"
                f"secureClientPortAddress={self.host}\n"
                "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n"
            )
        self.jaas.write_text(
            "Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  user_{SASL_USER}="{SASL_PASSWORD}";\n}};\n'
        )

    def command(self) -> list[str]:
        java, *rest = super().command()
        return [
            java,
            "-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"-Dzookeeper.ssl.keyStore.location={self.server_pem}",
            "-Dzookeeper.ssl.keyStore.type=PEM",
            f"-Dzookeeper.ssl.trustStore.location={self.ca}",
            "-Dzookeeper.ssl.trustStore.type=PEM",
            "-Dzookeeper.ssl.clientAuth=need",
            f"-Djava.security.auth.login.config={self.jaas}",
            "-Dzookeeper.sessionRequireClientSASLAuth=true",
            *rest,
        ]

    def _probe_ready(self) -> bool:
        # A plain session would be refused (SASL is required): the server answering
        # four-letter words is enough; the tests' own TLS sessions prove the rest.
        if self.four_letter_word("ruok") != "imok":
            self._last_probe_error = "ruok did not answer imok"
            return False
        return True

    def tls(self, client_cert: bool = True) -> ZooKeeperTls:
        if client_cert:
            return ZooKeeperTls(self.ca, self.client_cert, self.client_key)
        return ZooKeeperTls(self.ca)


@pytest.fixture
def tls_zookeeper(tmp_path: Path):
    zk = TlsZooKeeper(tmp_path)
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture
def tls_store(tls_zookeeper: TlsZooKeeper):
    client = make_client(
        tls_zookeeper.secure_connect_string,
        tls=tls_zookeeper.tls(),
        sasl=f"{SASL_USER}:{SASL_PASSWORD}",
    )
    client.start(timeout=20)
    try:
        yield FeatureStore(client, CHROOT)
    finally:
        client.stop()
        client.close()


def featurectl(zk: TlsZooKeeper, *args: str, cert: bool = True) -> subprocess.CompletedProcess:
    tls = ["--zookeeper-tls", "--zookeeper-tls-ca", zk.ca]
    if cert:
        tls += ["--zookeeper-tls-cert", zk.client_cert, "--zookeeper-tls-key", zk.client_key]
    return subprocess.run(
        [sys.executable, "-m", "featurectl", *args[:1], "--zookeeper", zk.secure_connect_string,
         "--chroot", CHROOT, *tls, "--zookeeper-sasl", f"{SASL_USER}:{SASL_PASSWORD}",
         "--timeout", "10", *args[1:]],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_gateway_and_featurectl_use_zookeeper_over_tls_with_sasl(
    gateway_factory, tls_zookeeper: TlsZooKeeper, tls_store: FeatureStore, tmp_path: Path
) -> None:
    zk = tls_zookeeper
    config = tmp_path / "zk-tls.toml"
    config.write_text(
        f'zookeeper_sasl = "{SASL_USER}:{SASL_PASSWORD}"\n'
        "[zookeeper_tls]\nenabled = true\n"
        f'ca = "{zk.ca}"\ncert = "{zk.client_cert}"\nkey = "{zk.client_key}"\n'
    )
    gateway_factory(
        "--config", str(config),
        "--zookeeper", zk.secure_connect_string,
        "--zookeeper-chroot", CHROOT,
        "--gateway-id", "gw-tls",
        "--features-catalogue", catalogue(tmp_path, "gw-tls", CATALOGUE_A),
    )  # fmt: skip
    # The gateway registered over TLS + SASL ...
    wait_for(lambda: tls_store.registrations(), what="registration over TLS")
    # ... and featurectl sees it and finalizes through the same kind of session.
    described = featurectl(zk, "describe", "--output", "json")
    assert described.returncode == 0, described.stderr
    assert "gw-tls" in described.stdout
    done = featurectl(zk, "finalize", "--feature", f"{FEATURE}=1")
    assert done.returncode == 0, done.stderr
    assert tls_store.read().levels == {FEATURE: 1}


def test_featurectl_without_a_client_certificate_is_refused_by_zookeeper(
    tls_zookeeper: TlsZooKeeper,
) -> None:
    refused = featurectl(tls_zookeeper, "describe", cert=False)
    assert refused.returncode == 2
    assert "cannot connect" in refused.stderr
