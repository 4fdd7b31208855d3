"""The releases read, and what each release's broker advertises in ApiVersions.

``RELEASES`` is the newest patch of every minor release on Maven Central (probed
2026-11-29 from kafka-clients' maven-metadata.xml). ``tracks`` computes, per track and
minor release, the ``[min, max]`` of every API key its broker advertises. The rules, each
with its evidence (``ApiKeysDump.java``'s output is the release's own ``ApiKeys`` enum,
and every rule is checked against it at each run, so a release that breaks a rule fails
the generation instead of writing a wrong table):

1. Before 2.2 no specs ship: the row is the release's default ApiVersions answer
   (``ApiVersionsResponse.API_VERSIONS_RESPONSE``, 0.10.2-2.1, the constant the broker
   sent), or for 0.10.0-0.10.1, which have none, every ApiKeys constant with the versions
   of ``Protocol.MIN_VERSIONS`` / ``CURR_VERSION`` (what their KafkaApis built the answer
   from). 2.2-2.7 still have that default answer: the rows from specs must equal it.
2. Specs before 2.8 have no ``listeners``: a ZooKeeper broker advertised every API in
   them (2.2-2.6: the default answer lists every key) except those ApiKeys marks
   ``isEnabled == false`` (2.7: the Raft keys 52-55, Vote to DescribeQuorum, shipped
   disabled).
3. From 2.8 a spec's ``listeners`` says who serves it: ``zkBroker`` a ZooKeeper-mode
   broker, ``broker`` a KRaft broker, ``controller`` a KRaft controller (checked against
   ``ApiKeys.zkBrokerApis()``, and ``kraftBrokerApis()`` 3.6-3.9 / ``brokerApis()``
   4.x). KRaft rows start at 2.8, the first release whose specs name a ``broker``
   listener (KIP-500 early access; production-ready from 3.3).
4. A spec with ``latestVersionUnstable`` has its highest version withheld unless the
   broker sets ``unstable.api.versions.enable`` (ApiKeys.latestVersion() includes it,
   the ApiVersions answer does not); an API left with no stable version is not
   advertised at all (3.5's ConsumerGroupHeartbeat, 3.9's share-group APIs).
5. Kafka 4.x advertises Produce from v0 though its spec starts at v3: KAFKA-18659 keeps
   v0-2 listed for old librdkafka builds (``ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION``
   is 0 in every 4.x jar, and ProduceRequest.json says so; seen on the wire with 4.1.1
   and 4.4.0), while a Produce v0-2 request closes the connection.
6. Telemetry (71 GetTelemetrySubscriptions, 72 PushTelemetry, KIP-714) is advertised
   only when a client-telemetry reporter is configured (ApiVersionManager's
   clientTelemetryEnabled): left out.
7. ZooKeeper mode ends with 3.9 (KIP-833; 4.0's specs have no zkBroker listener).

On the wire, tests/integration/test_release_tables.py holds the 3.9 row (3.9.2 in
ZooKeeper mode) and the 4.4 row (4.4.0, KRaft) against the real brokers, key by key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .apikeys import KeysDump
from .specs import Spec, version_range

RELEASES: tuple[str, ...] = (
    "0.10.0.1", "0.10.1.1", "0.10.2.2", "0.11.0.3", "1.0.2", "1.1.1", "2.0.1", "2.1.1",
    "2.2.2", "2.3.1", "2.4.1", "2.5.1", "2.6.3", "2.7.2", "2.8.2",
    "3.0.2", "3.1.2", "3.2.3", "3.3.2", "3.4.1", "3.5.2", "3.6.2", "3.7.2", "3.8.1", "3.9.2",
    "4.0.2", "4.1.2", "4.2.2", "4.3.1", "4.4.0",
)  # fmt: skip
DEFAULT_RELEASE = "4.4.0"

KRAFT_FROM = (2, 8)
ZOOKEEPER_UNTIL = (4, 0)
TELEMETRY_KEYS = frozenset({71, 72})
PRODUCE = 0

Row = dict[int, tuple[int, int]]
"""One broker's advertised ranges: API key -> (min, max)."""


def number(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def minor(release: str) -> str:
    """The minor release a patch belongs to: "3.9.2" -> "3.9", "0.10.2.2" -> "0.10.2"
    (before 1.0 the third number was the minor one)."""
    parts = release.split(".")
    return ".".join(parts[:3] if parts[0] == "0" else parts[:2])


def pinned(release: str) -> list[str]:
    """The releases read when ``release`` is the newest: every entry of ``RELEASES`` of an
    older minor release, then ``release`` itself."""
    older = [r for r in RELEASES if number(minor(r)) < number(minor(release))]
    return [*older, release]


def _requests(specs: Mapping[str, Spec]) -> dict[int, Spec]:
    return {s["apiKey"]: s for s in specs.values() if s["type"] == "request"}


def _advertised(key: int, spec: Spec, dump: KeysDump) -> tuple[int, int] | None:
    low, high = version_range(spec["validVersions"])
    if spec.get("latestVersionUnstable"):  # rule 4
        high -= 1
    if key == PRODUCE and "PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION" in dump.consts:
        low = dump.consts["PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION"]  # rule 5
    if high < low or key in TELEMETRY_KEYS:  # rules 4 and 6
        return None
    return low, high


def _served(spec: Spec, listener: str, dump: KeysDump) -> bool:
    """Whether a broker of this listener type serves the API at all (rules 2 and 3)."""
    if "listeners" in spec:
        return listener in spec["listeners"]
    flags = dump.flags.get(spec["apiKey"], {})
    return listener == "zkBroker" and flags.get("isEnabled", True)


def _check(release: str, what: str, derived: set[int], expected: frozenset[int] | None) -> None:
    if expected is not None and derived != expected:
        raise ValueError(
            f"{release}: the {what} keys the rules give differ from ApiKeys': "
            f"only ours {sorted(derived - expected)}, only ApiKeys' {sorted(expected - derived)}"
        )


def _spec_row(release: str, specs: Mapping[str, Spec], dump: KeysDump, listener: str) -> Row:
    requests = _requests(specs)
    for key, spec in requests.items():
        # ApiKeys is generated from these very specs: a mismatch is a reading error here.
        low, high = version_range(spec["validVersions"])
        if key not in dump.keys or dump.keys[key][1:] != (low, high):
            raise ValueError(f"{release}: key {key} is {low}-{high} in its spec, not in ApiKeys")
    served = {k for k, s in requests.items() if _served(s, listener, dump)}
    if listener == "zkBroker":
        _check(release, listener, served, dump.sets.get("zkBrokerApis"))
        if dump.default_answer:
            _check(release, "default answer", served, frozenset(dump.default_answer))
    else:
        expected = dump.sets.get("kraftBrokerApis", dump.sets.get("brokerApis"))
        _check(release, listener, served, expected)
    row = {k: r for k in sorted(served) if (r := _advertised(k, requests[k], dump)) is not None}
    return row


def _old_row(dump: KeysDump) -> Row:
    """Rule 1: a release before 2.2."""
    if dump.default_answer:
        return dict(sorted(dump.default_answer.items()))
    return {key: (oldest, latest) for key, (_, oldest, latest) in sorted(dump.keys.items())}


def tracks(
    releases: Sequence[str], specs: Mapping[str, Mapping[str, Spec]], dumps: Mapping[str, KeysDump]
) -> dict[str, list[tuple[str, Row]]]:
    """Per track ("zookeeper", "kraft") its (release, row) pairs, oldest first."""
    out: dict[str, list[tuple[str, Row]]] = {"zookeeper": [], "kraft": []}
    for release in releases:
        dump = dumps[release]
        if not specs.get(release):
            out["zookeeper"].append((release, _old_row(dump)))
            continue
        if number(release) < ZOOKEEPER_UNTIL:
            out["zookeeper"].append((release, _spec_row(release, specs[release], dump, "zkBroker")))
        if number(release) >= KRAFT_FROM:
            out["kraft"].append((release, _spec_row(release, specs[release], dump, "broker")))
    return out


def table(
    releases: Sequence[str], specs: Mapping[str, Mapping[str, Spec]], dumps: Mapping[str, KeysDump]
) -> dict[str, list[dict[str, Any]]]:
    """``tracks`` in the shape ``kafka_releases.json`` stores."""
    return {
        track: [
            {
                "release": minor(release),
                "kafka": release,
                "versions": {str(k): list(r) for k, r in row.items()},
            }
            for release, row in rows
        ]
        for track, rows in tracks(releases, specs, dumps).items()
    }
