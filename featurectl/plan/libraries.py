"""Which client library a client is, and which of its releases first speaks an API
version: ``data/client_libraries.json`` (hand-written, sources cited per row) and, for
the Java client, Kafka's own release tables. Plain Python, no Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from gateway.versions import accepted_versions, release_named, release_tracks

# What a client-id identity's label looks like ("client-id:kafka-python-2.0.2").
CLIENT_ID = "client-id:"
_VERSION = re.compile(r"(\d+(?:\.\d+){1,3})")


@dataclass(frozen=True, slots=True)
class Library:
    """One client library as the plan knows it (a client's library and version)."""

    name: str
    version: str | None  # None: the client did not say (a client-id without a version)
    guessed: bool  # named from its client id's prefix, not its KIP-511 software name


@dataclass(frozen=True, slots=True)
class FirstRelease:
    """The first release of a library known to speak a version, and how sure that is."""

    since: str
    approximate: bool
    at_the_latest: bool  # an upper bound (KIP-896's reference release), not the first
    source: str

    def text(self) -> str:
        bound = "at the latest " if self.at_the_latest else ""
        rough = ", approximate" if self.approximate else ""
        return f"{bound}{self.since} ({self.source}{rough})"


@cache
def table() -> dict[str, Any]:
    text = resources.files("featurectl").joinpath("data/client_libraries.json").read_text()
    doc: dict[str, Any] = json.loads(text)
    return doc


def library_of(name: str | None, version: str | None) -> Library | None:
    """The library behind a client's labels: its KIP-511 software name, else its client
    id's prefix (``client-id:kafka-python-2.0.2``: kafka-python 2.0.2, guessed)."""
    if not name:
        return None
    libraries: Mapping[str, Any] = table()["libraries"]
    for library, spec in libraries.items():
        if name in spec["software_names"]:
            known = version if version and version not in ("unknown", "other") else None
            return Library(library, known, guessed=False)
    if not name.startswith(CLIENT_ID):
        return None
    client_id = name.removeprefix(CLIENT_ID)
    for library, spec in libraries.items():
        for prefix in spec["client_id_prefixes"]:
            if client_id.startswith(prefix):
                found = _VERSION.search(client_id[len(prefix) :])
                return Library(library, found.group(1) if found else None, guessed=True)
    return None


def first_release(library: str, api_key: int, version: int) -> FirstRelease | None:
    """The first release of ``library`` known to speak ``version`` (or later) of
    ``api_key``; None when the table cannot say."""
    spec = table()["libraries"].get(library)
    if spec is None:
        return None
    if spec.get("from_release_table"):
        java = _java_first(api_key, version)
        if java is not None:
            return java
    rows = [r for r in spec["speaks"] if r["api_key"] == api_key and r["version"] >= version]
    if rows:
        row = min(rows, key=lambda r: _number(r["since"]))
        return FirstRelease(row["since"], row["approximate"], False, row["source"])
    baseline = spec.get("baseline")
    if baseline is not None:
        # The baseline release speaks every minimum of its Kafka release (KIP-896 chose
        # them so that it does): it answers for any version up to those minimums.
        floor = accepted_versions(release_named(baseline["kafka"])).get(api_key)
        if floor is not None and version <= floor[0]:
            return FirstRelease(
                baseline["since"], baseline["approximate"], baseline["at_the_latest"],
                baseline["source"],
            )  # fmt: skip
    return None


def pinned_remedy(library: str) -> str:
    """How to let ``library`` negotiate instead of pinning an old protocol."""
    spec = table()["libraries"].get(library) or {}
    return str(spec.get("pinned") or "unpin its protocol version")


def speaks(library: Library, first: FirstRelease | None) -> bool:
    """Whether the client's own release is at least ``first`` (it could speak the
    version now: it is pinned or configured below it)."""
    if first is None or library.version is None or first.at_the_latest:
        return False
    return _number(library.version) >= _number(first.since)


def _java_first(api_key: int, version: int) -> FirstRelease | None:
    """The first Kafka release whose kafka-clients speaks ``version`` of ``api_key``:
    its broker's advertised maximum, on either track (the client is the same jar)."""
    for release in sorted(
        (r for rows in release_tracks().values() for r in rows), key=lambda r: r.number
    ):
        high = release.versions.get(api_key, (0, -1))[1]
        if high >= version:
            return FirstRelease(f"{release.name}.0", False, False, "kafka_releases.json")
    return None


def _number(text: str) -> tuple[int, ...]:
    found = _VERSION.search(text)
    return tuple(int(p) for p in found.group(1).split(".")) if found else ()


__all__ = ["FirstRelease", "Library", "first_release", "library_of", "pinned_remedy", "speaks"]
