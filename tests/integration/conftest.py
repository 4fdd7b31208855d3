"""Fixtures shared by the feature-gating tests (test_features, test_plan_e2e)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
