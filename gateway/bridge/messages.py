"""Any version of any Kafka message, decoded to a dict and encoded again: sans-I/O, driven
by Kafka's own message specs (``gateway/data/kafka_messages.json``).

The version bridge (``gateway.bridge``) converts a request a client sent at a version the
upstream no longer accepts up to one it does, and the answer back down. kio, the codec
of the APIs the gateway rewrites, has no schemas for the versions Kafka 4.0 removed, and
a converter needs one structure for every version of a message anyway, so this module
reads the specs themselves: a message decodes to a dict keyed by the spec's field names
(arrays of structs are lists of dicts, ``records`` stay raw bytes), and ``encode`` writes
the fields the target version has, taking the spec's default for each one the dict lacks
and leaving out every key the version does not have. ``convert`` is the two together.

Unknown tagged fields survive a round trip at one version under ``UNKNOWN_TAGS``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ..protocol import Incomplete, Malformed, read_uvarint, write_uvarint

# A struct's unknown tagged fields, {tag: raw bytes}: kept for a re-encode at one version.
UNKNOWN_TAGS = "_tags"

Message = dict[str, Any]

_FIXED: dict[str, struct.Struct] = {
    "bool": struct.Struct(">?"),
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "uint32": struct.Struct(">I"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
}
_INT16 = _FIXED["int16"]
_INT32 = _FIXED["int32"]
_INT8 = _FIXED["int8"]
_ZERO_UUID = bytes(16)


def _versions(text: str | None) -> tuple[int, int]:
    """A spec's version set ("3+", "0-2", "5", "none") as an inclusive (low, high)."""
    if not text or text == "none":
        return (1, 0)
    if text.endswith("+"):
        return (int(text[:-1]), 0x7FFF)
    low, _, high = text.partition("-")
    return (int(low), int(high or low))


def _within(versions: tuple[int, int], version: int) -> bool:
    return versions[0] <= version <= versions[1]


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a struct at one version."""

    name: str
    # A primitive ("int32", "string", "records", ...) or "struct"; ``array`` wraps it.
    kind: str
    array: bool
    nullable: bool
    # Compact strings, bytes and arrays (the message's flexible versions, unless the
    # field says otherwise: the request header's ClientId never is).
    compact: bool
    tag: int | None
    default: Any
    children: Struct | None


@dataclass(frozen=True, slots=True)
class Struct:
    fields: tuple[Field, ...]  # the fields on the wire, in order (tagged ones excluded)
    tagged: dict[int, Field]  # tag → field; empty where the version is not flexible
    flexible: bool


def _default(kind: str, array: bool, nullable: bool, text: Any, children: Struct | None) -> Any:
    """The spec's default for a field, else Kafka's (0, false, "", empty)."""
    if array:
        return None if nullable and text == "null" else []
    if text == "null" and nullable:
        return None
    if kind == "struct":
        assert children is not None
        return None if nullable and text == "null" else _defaults(children)
    if kind == "bool":
        return str(text).lower() == "true"
    if kind == "float64":
        return float(text) if text is not None else 0.0
    if kind in _FIXED:
        return int(str(text), 0) if text not in (None, "") else 0
    if kind == "string":
        return "" if text is None else str(text)
    if kind == "uuid":
        return _ZERO_UUID
    return b""  # bytes, records


def _defaults(struct_: Struct) -> Message:
    values = {f.name: f.default for f in struct_.fields}
    values.update({f.name: f.default for f in struct_.tagged.values()})
    return values


def _compile(
    fields: list[dict[str, Any]], version: int, flexible: bool, common: dict[str, Any]
) -> Struct:
    plain: list[Field] = []
    tagged: dict[int, Field] = {}
    for spec in fields:
        if not _within(_versions(spec["versions"]), version):
            continue
        kind = spec["type"]
        array = kind.startswith("[]")
        if array:
            kind = kind[2:]
        children = None
        if "fields" in spec or kind in common:
            sub = spec["fields"] if "fields" in spec else common[kind]["fields"]
            children = _compile(sub, version, flexible, common)
            kind = "struct"
        elif kind not in _FIXED and kind not in ("string", "bytes", "records", "uuid"):
            raise ValueError(f"field {spec['name']}: unknown type {spec['type']!r}")
        nullable = _within(_versions(spec.get("nullableVersions")), version)
        compact = flexible and _within(_versions(spec.get("flexibleVersions", "0+")), version)
        is_tagged = flexible and _within(_versions(spec.get("taggedVersions")), version)
        field = Field(
            spec["name"],
            kind,
            array,
            nullable,
            compact,
            spec.get("tag") if is_tagged else None,
            _default(kind, array, nullable, spec.get("default"), children),
            children,
        )
        if field.tag is not None:
            tagged[field.tag] = field
        else:
            plain.append(field)
    return Struct(tuple(plain), tagged, flexible)


@cache
def _specs() -> dict[str, list[dict[str, Any]]]:
    text = resources.files("gateway").joinpath("data/kafka_messages.json").read_text("utf-8")
    messages: dict[str, list[dict[str, Any]]] = json.loads(text)["messages"]
    return messages


def message_versions(name: str) -> tuple[int, int] | None:
    """Every version of message ``name`` (e.g. "FetchRequest") some release had."""
    entries = _specs().get(name)
    if not entries:
        return None
    return (min(e["versions"][0] for e in entries), max(e["versions"][1] for e in entries))


@cache
def schema(name: str, version: int) -> Struct:
    """Message ``name`` at ``version``, from the spec of the newest release that had it."""
    for entry in _specs().get(name, ()):
        low, high = entry["versions"]
        if low <= version <= high:
            spec = entry["spec"]
            common = {c["name"]: c for c in spec.get("commonStructs", ())}
            flexible = _within(_versions(spec.get("flexibleVersions")), version)
            return _compile(spec["fields"], version, flexible, common)
    raise KeyError(f"{name} has no version {version}")


# -- decoding --------------------------------------------------------------------------
class _Reader:
    __slots__ = ("buf", "keep", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int, keep: bool = True) -> None:
        self.buf = memoryview(buf)
        self.pos = pos
        self.keep = keep  # unknown tagged fields kept (``UNKNOWN_TAGS``)

    def take(self, size: int) -> memoryview:
        end = self.pos + size
        if size < 0 or end > len(self.buf):
            raise Malformed(f"field of {size} bytes runs past the end")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def fixed(self, codec: struct.Struct) -> Any:
        return codec.unpack(self.take(codec.size))[0]

    def uvarint(self) -> int:
        try:
            value, self.pos = read_uvarint(self.buf, self.pos)
        except Incomplete:
            raise Malformed("varint runs past the end") from None
        return value

    def length(self, compact: bool, wide: bool) -> int:
        """A length or count; -1 for null."""
        if compact:
            return self.uvarint() - 1
        return int(self.fixed(_INT32 if wide else _INT16))


def _read_value(r: _Reader, f: Field, kind: str) -> Any:
    if kind in _FIXED:
        return r.fixed(_FIXED[kind])
    if kind == "uuid":
        return bytes(r.take(16))
    if kind == "struct":
        assert f.children is not None
        return _read_struct(r, f.children)
    n = r.length(f.compact, kind != "string")
    if n < 0:
        if not f.nullable:
            raise Malformed(f"{f.name} is null")
        return None
    data = r.take(n)
    if kind != "string":
        return bytes(data)
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError:
        raise Malformed(f"{f.name} is not UTF-8") from None


def _read_field(r: _Reader, f: Field) -> Any:
    if f.array:
        n = r.length(f.compact, True)
        if n < 0:
            if not f.nullable:
                raise Malformed(f"{f.name} is null")
            return None
        if n > len(r.buf) - r.pos:  # every element takes a byte at least
            raise Malformed(f"{f.name}: {n} elements cannot fit")
        return [_read_value(r, f, f.kind) for _ in range(n)]
    if f.kind == "struct" and f.nullable and r.fixed(_INT8) < 0:
        return None
    return _read_value(r, f, f.kind)


def _read_struct(r: _Reader, s: Struct) -> Message:
    out: Message = {}
    for f in s.fields:
        out[f.name] = _read_field(r, f)
    if s.flexible:
        for f in s.tagged.values():
            out[f.name] = f.default
        unknown: dict[int, bytes] = {}
        for _ in range(r.uvarint()):
            tag = r.uvarint()
            data = r.take(r.uvarint())
            known = s.tagged.get(tag)
            if known is None:
                unknown[tag] = bytes(data)
            else:
                out[known.name] = _read_field(_Reader(data, 0, r.keep), known)
        if unknown and r.keep:
            out[UNKNOWN_TAGS] = unknown
    return out


def decode(
    name: str,
    version: int,
    body: bytes | memoryview,
    *,
    strict: bool = True,
    keep_unknown: bool = True,
) -> Message:
    """A message body (no header) of ``name`` at ``version`` as a dict; ``strict``: bytes
    left after it are an error; ``keep_unknown``: unknown tagged fields kept."""
    r = _Reader(body, 0, keep_unknown)
    out = _read_struct(r, schema(name, version))
    if strict and r.pos != len(r.buf):
        raise Malformed(f"{name} v{version}: {len(r.buf) - r.pos} bytes after the message")
    return out


# -- encoding --------------------------------------------------------------------------
def _length(out: bytearray, n: int, compact: bool, wide: bool) -> None:
    if compact:
        out += write_uvarint(n + 1)
    else:
        out += (_INT32 if wide else _INT16).pack(n)


def _write_value(out: bytearray, f: Field, kind: str, value: Any) -> None:
    if kind in _FIXED:
        out += _FIXED[kind].pack(value)
    elif kind == "uuid":
        out += bytes(value) if value is not None else _ZERO_UUID
    elif kind == "struct":
        assert f.children is not None
        _write_struct(out, f.children, value if value is not None else {})
    elif value is None:
        if f.nullable:
            _length(out, -1, f.compact, kind != "string")
        else:  # a field the target cannot null: its empty value, as Kafka defaults
            _length(out, 0, f.compact, kind != "string")
    else:
        data = value.encode("utf-8") if kind == "string" else value
        _length(out, len(data), f.compact, kind != "string")
        out += data


def _write_field(out: bytearray, f: Field, value: Any) -> None:
    if f.array:
        if value is None:
            _length(out, -1 if f.nullable else 0, f.compact, True)
            return
        _length(out, len(value), f.compact, True)
        for item in value:
            _write_value(out, f, f.kind, item)
        return
    if f.kind == "struct" and f.nullable:
        if value is None:
            out += _INT8.pack(-1)
            return
        out += _INT8.pack(1)
    _write_value(out, f, f.kind, value)


def _write_struct(out: bytearray, s: Struct, values: Message) -> None:
    for f in s.fields:
        _write_field(out, f, values.get(f.name, f.default))
    if not s.flexible:
        return
    tags: dict[int, bytes] = dict(values.get(UNKNOWN_TAGS) or {})
    for tag, f in s.tagged.items():
        value = values.get(f.name, f.default)
        if value != f.default:  # Kafka writes a tagged field only when it differs
            data = bytearray()
            _write_field(data, f, value)
            tags[tag] = bytes(data)
    out += write_uvarint(len(tags))
    for tag in sorted(tags):
        out += write_uvarint(tag)
        out += write_uvarint(len(tags[tag]))
        out += tags[tag]


def encode(name: str, version: int, values: Message) -> bytes:
    """``values`` as a body of ``name`` at ``version``: the fields it lacks take the spec's
    defaults, and keys the version does not have are left out."""
    out = bytearray()
    _write_struct(out, schema(name, version), values)
    return bytes(out)


def convert(name: str, source: int, target: int, body: bytes | memoryview) -> bytes:
    """A body of ``name`` at version ``source`` re-encoded at ``target``."""
    # An unknown tag means what its version says: it is not carried to another.
    return encode(name, target, decode(name, source, body, strict=False, keep_unknown=False))
