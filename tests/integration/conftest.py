"""Fixtures shared by the integration tests: the feature-gating tests' ZooKeeper store
(test_features, test_plan_e2e, test_featurectl_protocol) and per-test certificates
(test_tls, test_featurectl_protocol)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from gateway.features.store import FeatureStore, make_client
from tests.harness import ZooKeeperProcess

# The ZooKeeper chroot the feature tests' gateways, featurectl and store share.
CHROOT = "/kafka-gateway-test"


@pytest.fixture
def store(zookeeper: ZooKeeperProcess) -> Iterator[FeatureStore]:
    """The operator's view of ZooKeeper (a kazoo session of the test's own)."""
    client = make_client(zookeeper.connect_string)
    client.start(timeout=15)
    try:
        yield FeatureStore(client, CHROOT)
    finally:
        client.stop()
        client.close()


@dataclass(frozen=True)
class Pki:
    ca: str  # the CA everything below is signed by
    server: str  # key + chain for "localhost", 127.0.0.1 and broker.internal
    client_cert: str  # a client certificate (CN=kafka-client) ...
    client_key: str  # ... and its key
    other_ca: str  # a CA that signed none of them


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1", "broker.internal")
    client = ca.issue_cert("client.test", common_name="kafka-client")
    paths = Pki(*(str(tmp_path / f"{n}.pem") for n in Pki.__dataclass_fields__))
    ca.cert_pem.write_to_path(paths.ca)
    server.private_key_and_cert_chain_pem.write_to_path(paths.server)
    client.cert_chain_pems[0].write_to_path(paths.client_cert)
    client.private_key_pem.write_to_path(paths.client_key)
    other.cert_pem.write_to_path(paths.other_ca)
    return paths
