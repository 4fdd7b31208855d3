"""Many releases' specs as one: each version of a message from the newest release that has it.

Kafka 4.0 dropped old versions (KIP-896: Produce v0-2, Fetch v0-3, ...) from its specs
while brokers and clients still speak them, and a new release adds versions. The union
over every release read keeps both: ``merge`` picks, per message and version, the newest
release whose spec still lists that version (so Produce v0-2 come from 3.9.x and v3-13
from 4.4.0). ``api_table`` then derives the per-key summary the gateway reads
(``kafka_protocol.json``) and ``messages_table`` the specs themselves
(``kafka_messages.json``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .layout import Layout, layout, same_layout
from .specs import Spec, flexible_from, trim, valid_versions


@dataclass(frozen=True, slots=True)
class Entry:
    """Versions ``low``..``high`` of one message, as ``release``'s ``spec`` has them."""

    low: int
    high: int
    release: str
    spec: Spec


Merged = dict[str, list[Entry]]
"""Per message name its entries, lowest versions first."""


def _identity(spec: Spec) -> tuple[str, int | str]:
    """What stays when Kafka renames a message: a request or response is its API key and
    side (ListOffset became ListOffsets in 2.8, ElectPreferredLeaders ElectLeaders in 2.4,
    AlterIsr AlterPartition in 3.2, ListClientMetricsResources ListConfigResources in
    4.1); a header is its name."""
    if "apiKey" in spec:
        return spec["type"], spec["apiKey"]
    return spec["type"], spec["name"]


def merge(releases: Sequence[tuple[str, Mapping[str, Spec]]]) -> Merged:
    """``releases``: (release, its specs by message name), oldest release first. A renamed
    message is one message, under its newest name."""
    newest: dict[tuple[str, int | str], dict[int, tuple[str, Spec]]] = {}
    names: dict[tuple[str, int | str], str] = {}
    for release, specs in releases:
        for name, spec in specs.items():
            identity = _identity(spec)
            names[identity] = name
            per_version = newest.setdefault(identity, {})
            for version in valid_versions(spec):
                per_version[version] = (release, spec)
    merged: Merged = {}
    for identity, name in sorted(names.items(), key=lambda item: item[1]):
        per_version = newest[identity]
        versions = sorted(per_version)
        if not versions:
            continue  # "none" in every release read
        if versions != list(range(versions[0], versions[-1] + 1)):
            raise ValueError(f"{name}: the releases' versions are not contiguous: {versions}")
        entries: list[Entry] = []
        for version in versions:
            release, spec = per_version[version]
            last = entries[-1] if entries else None
            if last is not None and last.release == release:
                entries[-1] = Entry(last.low, version, release, spec)
            else:
                entries.append(Entry(version, version, release, spec))
        merged[name] = entries
    return merged


def layouts(entries: Sequence[Entry]) -> dict[int, Layout]:
    return {v: layout(e.spec, v) for e in entries for v in range(e.low, e.high + 1)}


def _flexible_from(name: str, entries: Sequence[Entry]) -> int | None:
    """The first flexible version; raises if a later version is not flexible again."""
    flexible = [
        v
        for e in entries
        for v in range(e.low, e.high + 1)
        if (first := flexible_from(e.spec)) is not None and v >= first
    ]
    if not flexible:
        return None
    if flexible != list(range(flexible[0], entries[-1].high + 1)):
        raise ValueError(f"{name}: flexible versions {flexible} are not a suffix")
    return flexible[0]


def api_table(
    merged: Merged, releases: Sequence[tuple[str, Mapping[str, Spec]]]
) -> dict[str, dict[str, Any]]:
    """Per API key (as a string, in numeric order) its name, versions, first flexible
    version, listeners (over every release) and the versions that read like a lower one."""
    listeners: dict[int, set[str]] = {}
    for _, specs in releases:
        for spec in specs.values():
            if spec["type"] == "request":
                listeners.setdefault(spec["apiKey"], set()).update(spec.get("listeners", []))
    requests = {
        entries[-1].spec["apiKey"]: name
        for name, entries in merged.items()
        if entries[-1].spec["type"] == "request"
    }
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(requests):
        request = requests[key]
        response = request.removesuffix("Request") + "Response"
        entries = merged[request]
        if [(e.low, e.high) for e in entries] != [(e.low, e.high) for e in merged[response]]:
            # Kafka ships a request and its response in the same release with the same
            # validVersions; the merge relies on it.
            raise ValueError(f"{request}: request and response versions differ")
        out[str(key)] = {
            "name": request.removesuffix("Request"),
            "versions": [entries[0].low, entries[-1].high],
            "flexible_from": _flexible_from(request, entries),
            "listeners": sorted(listeners[key]),
            "same_layout": {
                "request": _keyed(same_layout(layouts(entries))),
                "response": _keyed(same_layout(layouts(merged[response]))),
            },
        }
    return out


def _keyed(mapping: Mapping[int, int]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(mapping.items())}


def messages_table(merged: Merged) -> dict[str, list[dict[str, Any]]]:
    """Per message name its entries as ``{"versions": [lo, hi], "release", "spec"}``."""
    return {
        name: [
            {"versions": [e.low, e.high], "release": e.release, "spec": trim(e.spec)}
            for e in entries
        ]
        for name, entries in merged.items()
    }
