"""The features an ApiVersions answer reports, and how the gateway's merge with the broker's.

A Kafka 4.x broker finalizes features of its own (metadata.version, kraft.version,
group.version, transaction.version, ...) and reports them in ApiVersions (KIP-584); the
gateways keep their own finalized levels in ZooKeeper for the features their catalogue
gates. A client talks to one endpoint, so it gets one answer, merged by these rules:

* **A feature the catalogue does not gate** (metadata.version, and anything a newer broker
  adds): reported exactly as the broker reports it.
* **A catalogue feature the broker also reports**: supported where both support it (the
  intersection of the two ranges); finalized at the *lower* of the two levels, since a
  client can only use what both the gateway lets through and the broker serves. With
  gating off the gateway enforces nothing, so the broker's level is reported.
* **One of Kafka's features the broker does not list** although it reports features
  (an epoch): the broker supports level 0 only, so the gateways' level is lowered to 0
  and the feature is left out of supported (Kafka 3.9 in ZooKeeper mode lists none).
* **A feature of the gateways' own** (a catalogue name Kafka does not define), or any
  feature behind a broker that reports none at all (Tansu, an answer below v3): the
  gateways' own range and level.
* **No finalized level above the supported range**, as Kafka never reports one: a
  level the broker finalized beyond what the gateways' catalogue lists is reported at
  the highest level both support.
* **The epoch** grows whenever either source's epoch grows, and never goes back for a
  client: ``gateway_epoch + upstream_epoch + 1`` when both sources have one, else the one
  that has (-1 when neither). Both are monotonic (the feature znode's data version, the
  KRaft metadata offset), so their sum is.

The finalized levels a gateway *enforces* (the versions it withholds) follow the same
lower-of-the-two rule: a level finalized in ZooKeeper but not on the broker gives clients
nothing the broker would refuse.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from .znode import NO_EPOCH

VersionRange = tuple[int, int]

#: Apache Kafka's own features (server-common's ``Feature`` enum, 4.4). A broker that
#: reports features but leaves one of these out supports only its level 0; a catalogue
#: feature outside this set is the gateways' own, which no broker speaks for.
APACHE_KAFKA_FEATURES = frozenset(
    {
        "metadata.version",
        "kraft.version",
        "group.version",
        "transaction.version",
        "eligible.leader.replicas.version",
        "share.version",
        "streams.version",
    }
)


@dataclass(frozen=True, slots=True)
class FeatureReport:
    """SupportedFeatures, FinalizedFeatures (name -> level) and the epoch of one answer."""

    supported: Mapping[str, VersionRange] = field(default_factory=dict)
    finalized: Mapping[str, int] = field(default_factory=dict)
    epoch: int = NO_EPOCH

    def knows(self, name: str) -> bool:
        """Whether this answer speaks for ``name``: it lists it, or it is one of Kafka's
        features and the answer carries features at all (an epoch), so leaving it out
        means level 0 only (a ZooKeeper-mode Kafka 3.9 lists none, and answers the KIP-848
        heartbeat it advertises with UNSUPPORTED_VERSION)."""
        return name in self.supported or (self.epoch != NO_EPOCH and name in APACHE_KAFKA_FEATURES)

    def key(self) -> tuple[object, ...]:
        """A hashable form, for caches keyed by what an upstream reported."""
        return (*self.shape(), self.epoch)

    def shape(self) -> tuple[object, ...]:
        """What support and version caps depend on: all but the epoch's value. KRaft's
        epoch is the metadata log's offset and moves with every topic change, so caches
        of what is negotiated (shared by every connection to an upstream) key on this."""
        return (
            tuple(sorted(self.supported.items())),
            tuple(sorted(self.finalized.items())),
            self.epoch != NO_EPOCH,
        )


NO_FEATURES = FeatureReport()


def merged_epoch(gateway_epoch: int, upstream_epoch: int) -> int:
    """One epoch that moves whenever either source's moves (see the module docstring)."""
    if gateway_epoch == NO_EPOCH:
        return upstream_epoch
    if upstream_epoch == NO_EPOCH:
        return gateway_epoch
    return gateway_epoch + upstream_epoch + 1


def supported_through(
    support: Mapping[str, VersionRange], upstream: FeatureReport
) -> dict[str, VersionRange]:
    """The gateway's support of each catalogue feature, capped by its broker's where the
    broker speaks for the feature (what the gateway registers and vouches for)."""
    out = {}
    for name, (low, high) in support.items():
        if upstream.knows(name):
            high = min(high, upstream.supported.get(name, (0, 0))[1])
        out[name] = (low, max(low, high))
    return out


def enforced_levels(
    gateway_levels: Mapping[str, int], upstream: FeatureReport, catalogue: Collection[str]
) -> dict[str, int]:
    """The catalogue's levels a gateway enforces: its own, lowered to the broker's level
    for each feature the broker knows."""
    out = {}
    for name in catalogue:
        level = gateway_levels.get(name, 0)
        if upstream.knows(name):
            level = min(level, upstream.finalized.get(name, 0))
        out[name] = level
    return out


def merge_reports(
    gateway: FeatureReport,
    upstream: FeatureReport,
    catalogue: Collection[str],
    *,
    gating: bool,
) -> FeatureReport:
    """The features a client is told: the gateway's report merged with its broker's."""
    supported = dict(upstream.supported)
    for name, (low, high) in gateway.supported.items():
        theirs = upstream.supported.get(name)
        if theirs is None:
            if not upstream.knows(name):
                supported[name] = (low, high)
        elif max(low, theirs[0]) <= min(high, theirs[1]):
            supported[name] = (max(low, theirs[0]), min(high, theirs[1]))
        else:
            supported.pop(name)  # no level both can serve
    finalized = {n: v for n, v in upstream.finalized.items() if n not in catalogue}
    if gating:
        finalized |= enforced_levels(gateway.finalized, upstream, catalogue)
    else:
        finalized |= {n: v for n, v in upstream.finalized.items() if n in catalogue}
    # Never a level above what is supported, as Kafka never reports one: a broker may
    # finalize a level the gateways' catalogue does not list (share.version 2 on 4.4).
    finalized = {n: min(v, supported.get(n, (0, v))[1]) for n, v in finalized.items()}
    finalized = {n: v for n, v in finalized.items() if v >= 1}
    return FeatureReport(supported, finalized, merged_epoch(gateway.epoch, upstream.epoch))


__all__ = [
    "APACHE_KAFKA_FEATURES",
    "NO_FEATURES",
    "FeatureReport",
    "enforced_levels",
    "merge_reports",
    "merged_epoch",
    "supported_through",
]
