"""The generated release tables (``gateway/data/kafka_releases.json``) against real brokers.

``scripts/kafka-protocol`` derives what each release's broker advertises in ApiVersions
from its jar's message specs and a few rules (``scripts/kafka_protocol/releases.py``).
Here the two brokers the suite runs answer for themselves: Kafka 3.9.2 in ZooKeeper mode
against the "zookeeper" row of 3.9, Kafka 4.4.0 (KRaft, combined mode) against the
"kraft" row of 4.4, key by key, min and max. The session's own broker is reused when it is
the one wanted; otherwise the test starts its own (a few seconds each).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.server.apache_kafka import KRAFT_VERSION, ZOOKEEPER_MODE_VERSION
from gateway.versions import Release, release_tracks
from tests.conftest import apache_kafka_version
from tests.harness import KafkaConnection
from tests.harness.apache_kafka import ApacheKafkaBroker

TRACKS = {"zookeeper": ZOOKEEPER_MODE_VERSION, "kraft": KRAFT_VERSION}


def row(track: str, kafka: str) -> Release:
    minor = ".".join(kafka.split(".")[:2])
    return next(r for r in release_tracks()[track] if r.name == minor)


def advertised(broker: ApacheKafkaBroker) -> dict[int, tuple[int, int]]:
    """What the broker itself advertises: ApiVersions v3 straight to it."""
    with KafkaConnection(broker.host, broker.port, timeout=10) as conn:
        answer = conn.api_versions(3)
    assert answer.error_code == 0
    return dict(answer.api_keys)


@pytest.fixture(scope="module", params=sorted(TRACKS))
def track_broker(request: pytest.FixtureRequest) -> Iterator[tuple[str, ApacheKafkaBroker]]:
    track = request.param
    version = TRACKS[track]
    if apache_kafka_version() == version:
        yield track, request.getfixturevalue("apache_kafka")
        return
    zookeeper = None
    if track == "zookeeper":
        zookeeper = request.getfixturevalue("shared_zookeeper").connect_string
    workdir = request.getfixturevalue("tmp_path_factory").mktemp(f"release-{track}")
    broker = ApacheKafkaBroker(workdir, version=version, zookeeper=zookeeper)
    broker.start()
    try:
        yield track, broker
    finally:
        broker.stop()


def test_row_is_read_from_the_release_the_suite_runs() -> None:
    # The rows come from the newest patch of each minor release; the suite's brokers are
    # those patches, so the comparison below is of one release with itself.
    for track, version in TRACKS.items():
        assert row(track, version).kafka == version


def test_broker_advertises_exactly_its_row(track_broker: tuple[str, ApacheKafkaBroker]) -> None:
    track, broker = track_broker
    expected = dict(row(track, broker.version).versions)
    got = advertised(broker)
    differ = {
        key: (expected.get(key), got.get(key))
        for key in sorted(set(expected) | set(got))
        if expected.get(key) != got.get(key)
    }
    assert differ == {}, f"{track} {broker.version}: key: (table, broker) {differ}"
