"""Kafka's message specs: reading them out of a kafka-clients jar, and their version ranges.

Every ``kafka-clients`` jar since 2.2 carries ``common/message/*.json``: one file per
request, response, header and data message, written as JSON with ``//`` comments (Kafka's
generator reads them with Jackson's ALLOW_COMMENTS). Only what a codec needs is kept
(``trim``): the docs ("about", comments) and the attributes that only Kafka's Java
generator uses (entityType, mapKey, zeroCopy) go.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Spec = dict[str, Any]
"""One message spec as parsed from its JSON file."""

SPEC_DIR = "common/message/"

# The message types the gateway's data holds; "data" specs (record payloads, the consumer
# protocol's blobs, snapshots) never travel as a request or response of their own.
WIRE_TYPES = frozenset({"request", "response", "header"})

KEPT_TOP = (
    "apiKey", "type", "name", "validVersions", "flexibleVersions", "latestVersionUnstable",
    "listeners", "fields", "commonStructs",
)  # fmt: skip
KEPT_FIELD = (
    "name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "default",
    "flexibleVersions", "ignorable", "fields",
)  # fmt: skip


def strip_comments(text: str) -> str:
    """``text`` without its ``//`` and ``/* */`` comments; text inside strings is kept (an
    "about" may hold a URL)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_spec(text: str) -> Spec:
    """The spec in ``text``. What follows the first JSON value is ignored, as Kafka's
    generator (Jackson's readTree) ignores it: 2.8's DescribeProducersRequest.json ends
    in a stray "]}"."""
    spec, _ = json.JSONDecoder().raw_decode(strip_comments(text).strip())
    if not isinstance(spec, dict) or "name" not in spec:
        raise ValueError("not a message spec")
    return spec


def read_jar(jar: Path) -> dict[str, Spec]:
    """Every request, response and header spec in ``jar``, by message name (empty for a jar
    older than 2.2, which has none)."""
    specs: dict[str, Spec] = {}
    with zipfile.ZipFile(jar) as archive:
        for member in sorted(archive.namelist()):
            if not (member.startswith(SPEC_DIR) and member.endswith(".json")):
                continue
            try:
                spec = parse_spec(archive.read(member).decode("utf-8"))
            except ValueError as error:
                raise ValueError(f"{jar.name}: {member}: {error}") from error
            if spec.get("type") in WIRE_TYPES:
                specs[spec["name"]] = spec
    return specs


# --- version ranges -------------------------------------------------------------------

NO_VERSIONS = (0, -1)
"""An empty range ("none")."""

UNBOUNDED = 0x7FFF
"""The upper end of "N+": int16's max, as in Kafka's generator."""


def version_range(text: str | None) -> tuple[int, int]:
    """Kafka's version-range syntax: "3-13", "9+", "5", "none" (or absent) as an inclusive
    (low, high) pair; "none" is ``NO_VERSIONS``."""
    if text is None or text == "none":
        return NO_VERSIONS
    if text.endswith("+"):
        return int(text[:-1]), UNBOUNDED
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def contains(text: str | None, version: int) -> bool:
    low, high = version_range(text)
    return low <= version <= high


def valid_versions(spec: Spec) -> range:
    """The versions a spec's release accepts (its ``validVersions``)."""
    low, high = version_range(spec["validVersions"])
    return range(low, high + 1)


def flexible_from(spec: Spec) -> int | None:
    """The first flexible version of the message, or None when it has none."""
    low, high = version_range(spec.get("flexibleVersions"))
    return low if high >= low else None


# --- trimming -------------------------------------------------------------------------


def _trim_fields(fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for field in fields:
        kept = {k: field[k] for k in KEPT_FIELD if k in field}
        if "fields" in kept:
            kept["fields"] = _trim_fields(kept["fields"])
        out.append(kept)
    return out


def trim(spec: Spec) -> Spec:
    """``spec`` with what a codec needs and nothing else."""
    kept = {k: spec[k] for k in KEPT_TOP if k in spec}
    if "fields" in kept:
        kept["fields"] = _trim_fields(kept["fields"])
    if "commonStructs" in kept:
        kept["commonStructs"] = [
            {"name": s["name"], "versions": s.get("versions", "0+"),
             "fields": _trim_fields(s["fields"])}
            for s in kept["commonStructs"]
        ]  # fmt: skip
    return kept


def walk_fields(fields: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every field, nested ones included, depth first."""
    for field in fields:
        yield field
        yield from walk_fields(field.get("fields", []))
