"""The on-disk metrics dataset shared by ``featurectl collect``, the synthetic generator
and ``featurectl plan`` (pure file layout, no Spark, no network).

::

    DIR/
      samples/date=<day>/*.parquet     the samples, one row each (``columnar``; the default)
      scrapes/<round>/<gateway>.prom   or: one scrape of one gateway, Prometheus text format
      scrapes/<round>/<gateway>.json   its sidecar: gateway id, url, exact scrape time
      state/<stamp>.json               finalized levels + epoch, registrations (ZooKeeper)

A dataset may hold both formats (an old text dataset that a newer collect appends
Parquet to); the planner reads the union. ``featurectl convert`` turns text into Parquet.

``<round>`` is the UTC time the round started (``20250102T030405.678Z``); every sample
of a round gets that time, so the gateways of a round add up. Files imported from
Prometheus go to ``<stamp>-prometheus-<n>`` and carry a timestamp on every sample line,
as the exposition format allows; a line's own timestamp wins.

``<gateway>`` is the gateway id, encoded reversibly (``encode_name``): ids are
``host:port`` by default and Hadoop's ``Path``, which Spark reads through, rejects ``:``
in file names. The planner takes the gateway and time from the path alone, so it never
opens the sidecars (thousands of tiny files cost more to open than to read the scrapes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.features.znode import Finalized, Registration

SCRAPES = "scrapes"
STATE = "state"
PROM_SUFFIX = ".prom"
SIDECAR_SUFFIX = ".json"
SIDECAR_VERSION = 1
STATE_VERSION = 1

_STAMP_FORMAT = "%Y%m%dT%H%M%S"
# Kept as they are in file names; every other byte becomes ~XX (hex).
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_")
_ESCAPE = re.compile(r"~([0-9A-F]{2})")
_ROUND = re.compile(r"^(\d{8}T\d{6}\.\d{3}Z)")


def stamp(when: datetime) -> str:
    """A sortable, file-name-safe UTC stamp with milliseconds: ``20250102T030405.678Z``."""
    when = when.astimezone(UTC)
    return f"{when.strftime(_STAMP_FORMAT)}.{when.microsecond // 1000:03d}Z"


def epoch_ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def iso_time(ms: int | None) -> str | None:
    """Epoch milliseconds as plan.json and the reports write them: RFC 3339 UTC to the
    second (``2025-01-06T00:00:00Z``); None stays None."""
    if ms is None:
        return None
    return (
        datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )


def encode_name(gateway_id: str) -> str:
    """A file stem for ``gateway_id`` that ``decode_name`` turns back into it.

    Letters, digits, ``.``, ``-`` and ``_`` stay; other bytes (UTF-8) become ``~XX``,
    and so does a leading ``.`` or ``_``, which would make Spark skip the file as hidden.
    """
    out = []
    for index, byte in enumerate(gateway_id.encode()):
        char = chr(byte)
        plain = char in _PLAIN and not (index == 0 and char in "._")
        out.append(char if plain else f"~{byte:02X}")
    return "".join(out) or "~"


def decode_name(stem: str) -> str:
    if stem == "~":
        return ""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), stem).encode("latin-1").decode()


def parse_utc(text: str) -> datetime:
    """An RFC 3339 time (``2025-01-06T00:00:00Z``); without a zone, UTC. ValueError if not."""
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def round_time_ms(round_name: str) -> int | None:
    """The start of a round from its directory name, None if it is not one of ours."""
    match = _ROUND.match(round_name)
    if match is None:
        return None
    when = datetime.strptime(match.group(1), "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=UTC)
    return epoch_ms(when)


@dataclass(frozen=True, slots=True)
class ScrapeMeta:
    """The sidecar of one ``.prom`` file."""

    gateway_id: str
    url: str | None
    scrape_time_ms: int
    # "scrape" (featurectl collect), "prometheus" (query_range import) or "synthetic".
    source: str = "scrape"
    version: int = SIDECAR_VERSION

    def to_json(self) -> str:
        doc = asdict(self)
        doc["scrape_time"] = datetime.fromtimestamp(self.scrape_time_ms / 1000, UTC).isoformat()
        return json.dumps(doc, separators=(",", ":"))


class RoundWriter:
    """Writes the files of one round directory: one scrape per gateway."""

    def __init__(self, root: Path, round_name: str) -> None:
        self.directory = Path(root) / SCRAPES / round_name
        self._taken: set[str] = set()
        self.written: list[Path] = []

    def write(self, meta: ScrapeMeta, text: str) -> Path:
        name = encode_name(meta.gateway_id)
        if name in self._taken:
            # Two scrapes of one gateway in a round would count its traffic twice.
            raise ValueError(f"gateway {meta.gateway_id!r} already has a scrape in this round")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._taken.add(name)
        prom = self.directory / f"{name}{PROM_SUFFIX}"
        # Written to a temporary name and renamed: a reader never sees half a scrape.
        _write_atomic(prom, text)
        _write_atomic(self.directory / f"{name}{SIDECAR_SUFFIX}", meta.to_json() + "\n")
        self.written.append(prom)
        return prom


class TextSink:
    """The text layout as a sink (see ``columnar.SampleSink``): each round written at once."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def round(self, round_name: str) -> RoundWriter:
        return RoundWriter(self.root, round_name)

    def flush(self) -> list[Path]:
        return []


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


# -- registry / finalized state snapshots ------------------------------------------------


def registration_to_dict(reg: Registration) -> dict[str, Any]:
    doc = asdict(reg)
    doc["features"] = {name: list(rng) for name, rng in sorted(reg.features.items())}
    return doc


def registration_from_dict(doc: Mapping[str, Any]) -> Registration:
    features = {name: (int(r[0]), int(r[1])) for name, r in (doc.get("features") or {}).items()}
    return Registration(
        gateway_id=str(doc["gateway_id"]),
        listener=str(doc.get("listener", "")),
        upstream=str(doc.get("upstream", "")),
        features=features,
        metrics_url=doc.get("metrics_url"),
        broker_software_name=str(doc.get("broker_software_name", "unknown")),
        broker_software_version=str(doc.get("broker_software_version", "unknown")),
        gateway_version=str(doc.get("gateway_version", "unknown")),
        timestamp_ms=int(doc.get("timestamp_ms", 0)),
        broker_finalized=doc.get("broker_finalized"),
    )


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    """What ZooKeeper said at one moment: finalized levels and the live gateways."""

    time_ms: int
    finalized: Finalized
    registrations: tuple[Registration, ...]
    zookeeper: str | None = None
    chroot: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "time": datetime.fromtimestamp(self.time_ms / 1000, UTC).isoformat(),
            "time_ms": self.time_ms,
            "zookeeper": self.zookeeper,
            "chroot": self.chroot,
            "finalized": {
                "levels": dict(sorted(self.finalized.levels.items())),
                "epoch": self.finalized.epoch,
            },
            "registrations": [registration_to_dict(r) for r in self.registrations],
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> StateSnapshot:
        finalized = doc.get("finalized") or {}
        return cls(
            time_ms=int(doc.get("time_ms", 0)),
            finalized=Finalized(
                {str(k): int(v) for k, v in (finalized.get("levels") or {}).items()},
                int(finalized.get("epoch", -1)),
            ),
            registrations=tuple(registration_from_dict(r) for r in doc.get("registrations", [])),
            zookeeper=doc.get("zookeeper"),
            chroot=doc.get("chroot"),
        )


def write_state(root: Path, snapshot: StateSnapshot) -> Path:
    directory = Path(root) / STATE
    directory.mkdir(parents=True, exist_ok=True)
    when = datetime.fromtimestamp(snapshot.time_ms / 1000, UTC)
    path = directory / f"{stamp(when)}.json"
    _write_atomic(path, json.dumps(snapshot.to_dict(), indent=1) + "\n")
    return path


__all__ = [
    "PROM_SUFFIX",
    "SCRAPES",
    "SIDECAR_SUFFIX",
    "STATE",
    "RoundWriter",
    "ScrapeMeta",
    "StateSnapshot",
    "TextSink",
    "decode_name",
    "encode_name",
    "epoch_ms",
    "iso_time",
    "parse_utc",
    "registration_from_dict",
    "registration_to_dict",
    "round_time_ms",
    "stamp",
    "write_state",
]
