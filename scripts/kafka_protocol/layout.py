"""The wire layout of one version of a message, to tell which versions read alike.

Two versions have the same layout when the same bytes mean the same thing in both: the
fields present at that version, in order, each with its type (nested structs compared by
their own layout, not their name), nullability, tag and compactness at that version, and
whether the version is flexible (a tagged-field section, compact strings and arrays).
Field names are not part of it (they never reach the wire), nor are the docs. Defaults
count only for tagged fields: a tagged field equal to its default is left off the wire.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .specs import Spec, contains

PRIMITIVES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "string",
     "bytes", "uuid", "records"}
)  # fmt: skip

Layout = tuple[Any, ...]
"""A hashable, comparable description of a message's bytes at one version."""


def structs(spec: Spec) -> dict[str, list[dict[str, Any]]]:
    """Struct types by name: the spec's commonStructs and every struct defined inline (a
    struct type defined once may be named again elsewhere in the same spec)."""
    found: dict[str, list[dict[str, Any]]] = {
        s["name"]: s["fields"] for s in spec.get("commonStructs", [])
    }

    def visit(fields: Sequence[Mapping[str, Any]]) -> None:
        for field in fields:
            if "fields" in field:
                found.setdefault(field["type"].removeprefix("[]"), field["fields"])
                visit(field["fields"])

    visit(spec.get("fields", []))
    return found


def _fields(
    fields: Sequence[Mapping[str, Any]],
    version: int,
    flexible: bool,
    registry: Mapping[str, list[dict[str, Any]]],
) -> Layout:
    out = []
    for field in fields:
        if not contains(field["versions"], version):
            continue
        kind = field["type"]
        array = kind.startswith("[]")
        base = kind.removeprefix("[]")
        if base in PRIMITIVES:
            element: Any = base
        else:
            nested = field.get("fields", registry.get(base))
            if nested is None:
                raise ValueError(f"field {field['name']}: unknown type {kind}")
            element = _fields(nested, version, flexible, registry)
        tagged = contains(field.get("taggedVersions"), version)
        # A field's own flexibleVersions ("none" on RequestHeader's ClientId) overrides the
        # message's: that string stays non-compact in flexible versions.
        compact = (
            contains(field["flexibleVersions"], version)
            if "flexibleVersions" in field
            else flexible
        )
        out.append(
            (
                array,
                element,
                contains(field.get("nullableVersions"), version),
                field.get("tag") if tagged else None,
                str(field.get("default")) if tagged else None,
                compact,
            )
        )
    return tuple(out)


def layout(spec: Spec, version: int) -> Layout:
    """The wire layout of ``spec`` at ``version``."""
    flexible = contains(spec.get("flexibleVersions"), version)
    return (flexible, _fields(spec.get("fields", []), version, flexible, structs(spec)))


def same_layout(layouts: Mapping[int, Layout]) -> dict[int, int]:
    """For each version whose layout equals a lower version's, that lowest version.

    ``layouts`` maps every version of one message to its layout (the versions may come
    from different releases' specs). Versions with a layout of their own are left out.
    """
    first: dict[Layout, int] = {}
    out: dict[int, int] = {}
    for version in sorted(layouts):
        seen = first.setdefault(layouts[version], version)
        if seen != version:
            out[version] = seen
    return out
