"""API version negotiation and broker release fingerprinting (pure functions, no I/O).

The gateway answers ApiVersions itself, so what it advertises must be what *both* sides
of it can handle: the upstream broker (learned from the upstream's ApiVersions answer),
the gateway's codec for the APIs it rewrites or answers (every other API passes through
at every version the broker offers) and the cluster's finalized feature levels (a
feature can withhold versions, e.g. Produce v12+ needs transaction.version 2).
``negotiate`` computes that intersection.

``fingerprint`` guesses which Apache Kafka release an upstream is from the max versions
it advertises, in the spirit of franz-go's ``pkg/kversion``. The per-release tables live
in ``data/kafka_releases.json`` (transcribed from franz-go, Kafka 0.10.0 to 4.4), so a
new release is a data change, not a code change. Vocabulary of the result
(``BrokerSoftware.version``):

``"3.7"``
    The advertised max versions are exactly those of Apache Kafka 3.7.
``"3.3-3.4"``
    A release from 3.3 up to 3.4: either those releases advertise identical versions
    (3.3 and 3.4 only differ in inter-broker APIs), or the broker is newer than 3.3 and
    older than 3.4 in every key (a pre-release or a patched build).
``">=4.4"``
    Every key is at least that of the newest release in the table (a newer Kafka).
``"unknown"`` (with name ``"unknown"``)
    Looks like no Apache Kafka release: it lacks APIs every release since some point
    has, while being newer in others (Tansu, Redpanda, a custom build), or it is older
    than 0.10.0 (which cannot answer ApiVersions anyway).

Only max versions are compared (minimums moved only once, in 4.0, and clients do not
care). Keys that only brokers or controllers talk to each other with, and keys that
depend on broker configuration, are skipped (``SKIPPED_KEYS``), as franz-go does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import NamedTuple

from .features.report import NO_FEATURES, FeatureReport
from .interceptors._codec import decode_response
from .interceptors._tagged import strip_unknown_tags
from .protocol import API_VERSIONS, api_range, known_api_keys

VersionRange = tuple[int, int]
"""Inclusive (min_version, max_version) of one API key."""

PASS_THROUGH: VersionRange = (0, 0x7FFF)
"""What the gateway carries of an API it does not decode: any version (an int16)."""

# Keys left out of fingerprinting, as in franz-go: 4 LeaderAndIsr, 5 StopReplica,
# 6 UpdateMetadata, 7 ControlledShutdown, 27 WriteTxnMarkers, 56 AlterPartition,
# 57 UpdateFeatures, 58 Envelope, 67 AllocateProducerIds (inter-broker or
# controller-only; other implementations rarely have them) and 71/72 telemetry
# (only advertised when the broker is configured for it).
SKIPPED_KEYS: frozenset[int] = frozenset({4, 5, 6, 7, 27, 56, 57, 58, 67, 71, 72})

UNKNOWN = "unknown"
APACHE_KAFKA = "Apache Kafka"


class BrokerSoftware(NamedTuple):
    """What a broker is (KIP-885's BrokerSoftwareName / BrokerSoftwareVersion)."""

    name: str
    version: str


UNKNOWN_SOFTWARE = BrokerSoftware(UNKNOWN, UNKNOWN)


class ApiVersionsError(Exception):
    """The upstream answered ApiVersions with an error (e.g. 35 for a too-new request).

    ``ranges`` holds whatever ApiKeys came with it: on error 35 Kafka lists key 18 with
    its own range, which tells the caller which version to retry with.
    """

    def __init__(self, error_code: int, ranges: dict[int, VersionRange]) -> None:
        super().__init__(f"ApiVersions failed with error code {error_code}")
        self.error_code = error_code
        self.ranges = ranges


@cache
def _gateway_supported() -> tuple[tuple[int, VersionRange], ...]:
    out = []
    for key in known_api_keys():
        versions = api_range(key)
        if versions is not None:
            out.append((key, versions))
    return tuple(out)


def gateway_supported() -> dict[int, VersionRange]:
    """Every key and version some Apache Kafka release accepted (Kafka's specs, the
    union over releases): what a broker of any release may offer.

    A fresh dict each call, so callers may modify it.
    """
    return dict(_gateway_supported())


def negotiate(
    limits: Mapping[int, VersionRange],
    upstream: Mapping[int, VersionRange],
    caps: Mapping[int, int] | None = None,
) -> dict[int, VersionRange]:
    """Per key the upstream offers: its range ∩ the gateway's ``limits`` ∩ ``caps``.

    ``limits`` holds the keys the gateway decodes (it rewrites or answers them), each
    with the versions its codec handles; every other key passes through as the
    upstream offers it, whatever its version, since forwarding needs only the request
    header. ``caps`` maps a key to the highest version the finalized feature levels
    allow; keys without a cap are not limited. A key whose intersection is empty
    (including a cap below its minimum) is left out: a client must never be told it
    may send something one side cannot take.
    """
    caps = caps or {}
    out: dict[int, VersionRange] = {}
    for key, (low, high) in upstream.items():
        limit = limits.get(key)
        if limit is not None:
            low = max(low, limit[0])
            high = min(high, limit[1])
        cap = caps.get(key)
        if cap is not None:
            high = min(high, cap)
        if low <= high:
            out[key] = (low, high)
    return out


def parse_api_versions_response(body: bytes | memoryview, version: int) -> dict[int, VersionRange]:
    """The ranges an upstream advertises, from its ApiVersions response body.

    Mirrors the Java client: a body that does not parse at the requested version is
    read as v0, because brokers answer a too-new request in the v0 format. Top-level
    tagged fields kio does not know (e.g. KIP-885 fields of a gateway further up) are
    dropped first, since kio refuses unknown tags. Raises ``ApiVersionsError`` when the
    response carries an error code, ``ValueError`` when it cannot be read at all.
    """
    return parse_upstream_api_versions(body, version)[0]


def parse_upstream_api_versions(
    body: bytes | memoryview, version: int
) -> tuple[dict[int, VersionRange], FeatureReport]:
    """The ranges and the features (KIP-584, v3+) an upstream's ApiVersions answer reports;
    read as ``parse_api_versions_response`` reads it."""
    data = bytes(body)
    message = None
    for attempt in dict.fromkeys((version, 0)):
        try:
            cleaned = strip_unknown_tags(API_VERSIONS, attempt, data)
            message = decode_response(API_VERSIONS, attempt, cleaned)
            break
        except Exception:  # kio raises assorted errors on malformed input
            continue
    if message is None:
        raise ValueError(f"unreadable ApiVersions v{version} response ({len(data)} bytes)")
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in message.api_keys}
    if message.error_code != 0:
        raise ApiVersionsError(int(message.error_code), ranges)
    if not hasattr(message, "supported_features"):
        return ranges, NO_FEATURES
    return ranges, FeatureReport(
        {f.name: (int(f.min_version), int(f.max_version)) for f in message.supported_features},
        {f.name: int(f.max_version_level) for f in message.finalized_features},
        int(message.finalized_features_epoch),
    )


# --- release fingerprint -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Release:
    """One Apache Kafka release: its name and the max version of each API key."""

    name: str
    max_versions: Mapping[int, int]

    @property
    def number(self) -> tuple[int, ...]:
        return tuple(int(part) for part in self.name.split("."))


@cache
def release_tracks() -> dict[str, tuple[Release, ...]]:
    """The release tables, oldest first, per track ("zookeeper", "kraft").

    ZooKeeper-mode and KRaft brokers of the same release advertise different keys
    (KRaft brokers lack some admin APIs until 3.5/3.6, have DescribeQuorum, ...), so
    each mode has its own table, as in franz-go.
    """
    raw = resources.files(__package__).joinpath("data/kafka_releases.json").read_text("utf-8")
    data = json.loads(raw)
    return {
        track: tuple(
            Release(row["release"], {int(k): int(v) for k, v in row["max_versions"].items()})
            for row in rows
        )
        for track, rows in data["tracks"].items()
    }


def _comparable(max_versions: Mapping[int, int]) -> dict[int, int]:
    return {k: v for k, v in max_versions.items() if k not in SKIPPED_KEYS}


def _at_least(a: Mapping[int, int], b: Mapping[int, int]) -> bool:
    """True when ``a`` offers every key of ``b`` at ``b``'s max version or higher."""
    return all(key in a and a[key] >= v for key, v in b.items())


@dataclass(frozen=True, slots=True)
class _Guess:
    low: Release  # newest release the broker is at least
    high: Release | None  # oldest release that is at least the broker (None: beyond tip)

    def version(self) -> str:
        if self.high is None:
            return f">={self.low.name}"
        if self.low.name == self.high.name:
            return self.low.name
        return f"{self.low.name}-{self.high.name}"

    def rank(self) -> tuple[int, tuple[int, ...], int]:
        # Exact beats everything; otherwise the guess with the newest lower bound, and a
        # bounded range beats an open one.
        exact = int(self.high is not None and self.low.name == self.high.name)
        return (exact, self.low.number, int(self.high is not None))


def _guess(broker: Mapping[int, int], track: Iterable[Release]) -> _Guess | None:
    releases = list(track)
    tables = [_comparable(r.max_versions) for r in releases]
    equal = [r for r, t in zip(releases, tables, strict=True) if t == broker]
    if equal:
        # Consecutive releases can share a table (3.3/3.4): report the span.
        return _Guess(equal[0], equal[-1])
    below = [r for r, t in zip(releases, tables, strict=True) if _at_least(broker, t)]
    if not below:
        return None
    low = below[-1]
    above = [
        r
        for r, t in zip(releases, tables, strict=True)
        if r.number > low.number and _at_least(t, broker)
    ]
    if above:
        return _Guess(low, above[0])
    if low is releases[-1]:
        return _Guess(low, None)
    return None  # newer than `low` in some keys, lacking keys of later releases: custom


def fingerprint(upstream: Mapping[int, VersionRange]) -> BrokerSoftware:
    """Guess the Apache Kafka release behind ``upstream``'s advertised ranges.

    See the module docstring for the vocabulary. Each track (ZooKeeper, KRaft) is
    tried; an exact match wins, otherwise the most precise and newest guess.
    """
    broker = _comparable({key: rng[1] for key, rng in upstream.items()})
    guesses = [g for t in release_tracks().values() if (g := _guess(broker, t)) is not None]
    if not guesses:
        return UNKNOWN_SOFTWARE
    best = max(guesses, key=_Guess.rank)
    return BrokerSoftware(APACHE_KAFKA, best.version())
