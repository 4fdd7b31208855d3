"""The JSON layouts kept in ZooKeeper (pure encode/decode, no I/O).

``<chroot>/feature`` holds Kafka's FeatureZNode (ZooKeeper-mode Kafka 2.7-3.x)::

    {"version":1,"status":1,"features":{"group.version":
        {"min_version_level":1,"max_version_level":1}}}

The finalized **epoch is the znode's data version** (``Stat.version``): ZooKeeper bumps
it on every write and never lowers it, so it only ever grows. A missing znode means
"nothing finalized" with epoch -1, as Kafka reports it. Status 0 (disabled) also means
nothing is finalized.

``<chroot>/gateways/ids/<id>`` holds one gateway's registration, with its supported
feature ranges in Kafka's broker-registration shape
(``{"name":{"min_version":x,"max_version":y}}``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

VersionRange = tuple[int, int]

FEATURE_ZNODE_VERSION = 1
STATUS_ENABLED = 1
STATUS_DISABLED = 0
NO_EPOCH = -1


class ZNodeError(ValueError):
    """A znode's data is not in the expected layout."""


@dataclass(frozen=True, slots=True)
class Finalized:
    """Finalized feature levels and their epoch (the feature znode's data version)."""

    levels: Mapping[str, int] = field(default_factory=dict)
    epoch: int = NO_EPOCH

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)


def encode_feature_znode(levels: Mapping[str, int]) -> bytes:
    features = {
        name: {"min_version_level": 1, "max_version_level": level}
        for name, level in sorted(levels.items())
        if level >= 1
    }
    doc = {"version": FEATURE_ZNODE_VERSION, "status": STATUS_ENABLED, "features": features}
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_feature_znode(data: bytes | None, epoch: int) -> Finalized:
    """Finalized levels from a feature znode's data; ``epoch`` is its Stat.version."""
    if not data:
        return Finalized({}, epoch)
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ZNodeError(f"feature znode is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") not in (1, 2):
        raise ZNodeError(f"feature znode version must be 1 or 2, got {doc!r:.200}")
    if doc.get("status", STATUS_ENABLED) == STATUS_DISABLED:
        return Finalized({}, epoch)
    features = doc.get("features", {})
    if not isinstance(features, dict):
        raise ZNodeError("feature znode 'features' must be an object")
    levels: dict[str, int] = {}
    for name, value in features.items():
        level = value.get("max_version_level") if isinstance(value, dict) else None
        if isinstance(level, bool) or not isinstance(level, int):
            raise ZNodeError(f"feature {name!r}: max_version_level must be an integer")
        if level >= 1:
            levels[name] = level
    return Finalized(levels, epoch)


@dataclass(frozen=True, slots=True)
class Registration:
    """What one live gateway publishes about itself."""

    gateway_id: str
    listener: str
    upstream: str
    features: Mapping[str, VersionRange]
    metrics_url: str | None = None
    broker_software_name: str = "unknown"
    broker_software_version: str = "unknown"
    gateway_version: str = "unknown"
    # Milliseconds since the epoch when this registration was written.
    timestamp_ms: int = 0
    # The levels its upstream broker finalized (ApiVersions v3+), so that featurectl can
    # say what the brokers have that the gateways withhold; None: the broker reports no
    # features (Tansu, Kafka in ZooKeeper mode) or it is not known yet.
    broker_finalized: Mapping[str, int] | None = None


def encode_registration(reg: Registration) -> bytes:
    doc: dict[str, Any] = {
        "version": 1,
        "listener": reg.listener,
        "metrics_url": reg.metrics_url,
        "upstream": reg.upstream,
        "broker_software": {
            "name": reg.broker_software_name,
            "version": reg.broker_software_version,
        },
        "gateway_version": reg.gateway_version,
        "features": {
            name: {"min_version": low, "max_version": high}
            for name, (low, high) in sorted(reg.features.items())
        },
        "timestamp": str(reg.timestamp_ms),
    }
    if reg.broker_finalized is not None:
        doc["broker_finalized_features"] = dict(sorted(reg.broker_finalized.items()))
    return json.dumps(doc, separators=(",", ":")).encode()


def _supported(doc: Mapping[str, Any]) -> dict[str, VersionRange]:
    return {
        name: (int(r["min_version"]), int(r["max_version"]))
        for name, r in (doc.get("features") or {}).items()
    }


def decode_broker_features(broker_id: str, data: bytes) -> dict[str, VersionRange]:
    """The supported features a ZooKeeper-mode Kafka broker registered in
    ``/brokers/ids/<id>`` (the same shape as a gateway's registration)."""
    try:
        return _supported(json.loads(data))
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ZNodeError(f"registration of broker {broker_id!r} is unreadable: {exc!r}") from None


def _broker_finalized(value: Any) -> dict[str, int] | None:
    if value is None:
        return None
    return {str(name): int(level) for name, level in value.items()}


def decode_registration(gateway_id: str, data: bytes) -> Registration:
    try:
        doc = json.loads(data)
        software = doc.get("broker_software") or {}
        features = _supported(doc)
        return Registration(
            gateway_id=gateway_id,
            listener=str(doc["listener"]),
            upstream=str(doc.get("upstream", "")),
            features=features,
            metrics_url=doc.get("metrics_url"),
            broker_software_name=str(software.get("name", "unknown")),
            broker_software_version=str(software.get("version", "unknown")),
            gateway_version=str(doc.get("gateway_version", "unknown")),
            timestamp_ms=int(doc.get("timestamp", 0)),
            broker_finalized=_broker_finalized(doc.get("broker_finalized_features")),
        )
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ZNodeError(f"registration of gateway {gateway_id!r} is unreadable: {exc!r}") from None


__all__ = [
    "NO_EPOCH",
    "Finalized",
    "Registration",
    "ZNodeError",
    "decode_broker_features",
    "decode_feature_znode",
    "decode_registration",
    "encode_feature_znode",
    "encode_registration",
]
