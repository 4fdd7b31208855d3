"""Exact access to the top-level tagged-field section of a flexible response body.

Why this exists: the gateway adds tagged fields kio does not know (KIP-885's
BrokerSoftwareName/Version), and kio refuses to *decode* unknown tags (it raises
``KeyError: 'Unknown tagged field tag'``) although the protocol says they must be
skipped. So the gateway encodes a body with kio, then splices its extra tags into the
body's last part, the top-level tagged section; and before decoding a body that may
carry foreign tags it strips them.

Finding where the top-level tagged section starts cannot be done from the end of the
bytes, so ``_skip_fields`` walks the body along kio's schema: every non-tagged field is
skipped by its wire size (fixed widths, compact or classic lengths, arrays, nullable
structs, nested tagged sections). This only *measures*; values are never decoded, so it
works on bytes from any encoder (another gateway, a real broker), canonical or not.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from functools import cache

from kio.index import load_response_schema

from ..protocol._wire import (
    INT16,
    INT32,
    Incomplete,
    Malformed,
    read_tagged_fields,
    read_uvarint,
    skip_tagged_fields,
    write_tagged_fields,
)
from ._codec import unwrap_optional

_FIXED_WIDTH = {
    "int8": 1,
    "bool": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kafka_type: str | None  # None for struct fields
    entity: type | None  # struct type, for struct and struct-array fields
    array: bool
    nullable: bool


@cache
def _layout(cls: type) -> tuple[tuple[_Field, ...], frozenset[int]]:
    """Non-tagged fields of a kio entity in wire order, and its known tags."""
    fields: list[_Field] = []
    tags: set[int] = set()
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            tags.add(int(f.metadata["tag"]))
            continue
        hint, nullable = unwrap_optional(f.type)
        array = typing.get_origin(hint) is tuple
        element = typing.get_args(hint)[0] if array else hint
        element, _ = unwrap_optional(element)
        entity = element if dataclasses.is_dataclass(element) else None
        kafka_type = None if entity is not None else f.metadata.get("kafka_type")
        if entity is None and kafka_type is None:
            raise TypeError(f"{cls.__name__}.{f.name}: no kafka_type")
        fields.append(_Field(f.name, kafka_type, entity, array, nullable))
    return tuple(fields), frozenset(tags)


def _need(buf: bytes | memoryview, end: int) -> int:
    if end > len(buf):
        raise Incomplete
    return end


def _skip_primitive(kafka_type: str, flexible: bool, buf: bytes | memoryview, pos: int) -> int:
    width = _FIXED_WIDTH.get(kafka_type)
    if width is not None:
        return _need(buf, pos + width)
    if kafka_type not in ("string", "bytes", "records"):
        raise Malformed(f"unsupported kafka_type {kafka_type!r}")
    if flexible:
        length_plus_one, pos = read_uvarint(buf, pos)
        return _need(buf, pos + max(length_plus_one - 1, 0))
    if kafka_type == "string":
        _need(buf, pos + 2)
        (length,) = INT16.unpack_from(buf, pos)
        pos += 2
    else:
        _need(buf, pos + 4)
        (length,) = INT32.unpack_from(buf, pos)
        pos += 4
    if length < -1:
        raise Malformed(f"negative length {length}")
    return _need(buf, pos + max(length, 0))


def _skip_entity(cls: type, buf: bytes | memoryview, pos: int) -> int:
    pos = _skip_fields(cls, buf, pos)
    if cls.__flexible__:  # type: ignore[attr-defined]
        pos = skip_tagged_fields(buf, pos)
    return pos


def _skip_fields(cls: type, buf: bytes | memoryview, pos: int) -> int:
    """Skip the non-tagged fields of ``cls`` at ``pos``; return where its tags start."""
    flexible: bool = cls.__flexible__  # type: ignore[attr-defined]
    fields, _tags = _layout(cls)
    for f in fields:
        if f.array:
            if flexible:
                count_plus_one, pos = read_uvarint(buf, pos)
                count = count_plus_one - 1
            else:
                _need(buf, pos + 4)
                (count,) = INT32.unpack_from(buf, pos)
                pos += 4
            for _ in range(max(count, 0)):
                if f.entity is not None:
                    pos = _skip_entity(f.entity, buf, pos)
                else:
                    assert f.kafka_type is not None
                    pos = _skip_primitive(f.kafka_type, flexible, buf, pos)
        elif f.entity is not None:
            if f.nullable:
                _need(buf, pos + 1)
                marker = buf[pos]
                pos += 1
                if marker == 0xFF:  # int8 -1: null struct (KIP-893)
                    continue
            pos = _skip_entity(f.entity, buf, pos)
        else:
            assert f.kafka_type is not None
            pos = _skip_primitive(f.kafka_type, flexible, buf, pos)
    return pos


def _schema(api_key: int, version: int) -> type:
    schema: type = load_response_schema(api_key, version)
    if not schema.__flexible__:  # type: ignore[attr-defined]
        raise ValueError(f"response {api_key} v{version} is not flexible: it has no tags")
    return schema


def top_level_tags_offset(api_key: int, version: int, body: bytes | memoryview) -> int:
    """Offset in a response ``body`` where its top-level tagged-field section starts.

    Raises ``Malformed`` when the body is truncated or the section does not end
    exactly at the end of the body (then it is not a body of this schema).
    """
    schema = _schema(api_key, version)
    try:
        offset = _skip_fields(schema, body, 0)
        end = skip_tagged_fields(body, offset)
    except Incomplete:
        raise Malformed(f"response {api_key} v{version} body is truncated") from None
    if end != len(body):
        raise Malformed(
            f"response {api_key} v{version} body has {len(body) - end} bytes after its end"
        )
    return offset


def read_top_level_tags(api_key: int, version: int, body: bytes | memoryview) -> dict[int, bytes]:
    """All top-level tagged fields of a response body as {tag: raw value bytes}."""
    offset = top_level_tags_offset(api_key, version, body)
    fields, _end = read_tagged_fields(body, offset)
    return fields


def splice_tagged_fields(
    api_key: int, version: int, body: bytes | memoryview, extra: Mapping[int, bytes]
) -> bytes:
    """Return ``body`` with ``extra`` tagged fields merged into its top-level section.

    Tags are written in ascending order as the protocol requires. A tag already present
    is replaced by the one in ``extra`` (so splicing is idempotent). Works for any
    flexible response whose top-level tagged section ends the body, which is all of
    them (e.g. ApiVersions v3+, DescribeCluster).
    """
    offset = top_level_tags_offset(api_key, version, body)
    existing, _end = read_tagged_fields(body, offset)
    merged = {**existing, **extra}
    return bytes(body[:offset]) + write_tagged_fields(merged)


def split_unknown_tags(
    api_key: int, version: int, body: bytes | memoryview
) -> tuple[bytes, dict[int, bytes]]:
    """(body without top-level tags kio does not know, those tags as {tag: raw value}).

    kio refuses unknown tags; splitting them off lets it decode the rest, and a caller
    that re-encodes can splice them back so nothing the broker sent is lost.
    Non-flexible versions have no tags and come back unchanged.
    """
    schema: type = load_response_schema(api_key, version)
    if not schema.__flexible__:  # type: ignore[attr-defined]
        return bytes(body), {}
    offset = top_level_tags_offset(api_key, version, body)
    existing, _end = read_tagged_fields(body, offset)
    known = _layout(schema)[1]
    unknown = {tag: value for tag, value in existing.items() if tag not in known}
    if not unknown:
        return bytes(body), {}
    kept = {tag: value for tag, value in existing.items() if tag in known}
    return bytes(body[:offset]) + write_tagged_fields(kept), unknown


def strip_unknown_tags(api_key: int, version: int, body: bytes | memoryview) -> bytes:
    """Drop top-level tags the kio schema does not know, so kio can decode the body."""
    return split_unknown_tags(api_key, version, body)[0]
