"""Walking a flexible response along its schema to where the top-level tagged section starts.

Why: Kafka puts fields that name brokers (KIP-951's NodeEndpoints in Produce v10+ and
Fetch v16+ responses) into the *last* part of a body, the top-level tagged section, and
where that section starts can only be found by walking every field before it. The walk
follows ``kio``'s generated schema (Kafka's message JSON files) and only *measures*:
values are never decoded, records are skipped by their length, so it works on bytes from
any encoder, canonical or not.

The walk is a generator that states what it needs next, so the same code serves a body
held whole (``tags_offset``) and a 100 MiB fetch streaming past in socket-sized chunks
(``TailFinder``, in ``_finders``), without gathering it:

* it yields ``n > 0``: "send me the next n bytes" (it gets a bytes-like of exactly n);
* it yields ``-n``: "skip the next n bytes" (it gets None).

Adjacent fixed-width fields are merged into one skip, so a Fetch partition costs about
seven steps whatever its record bytes.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Generator
from functools import cache
from typing import Any

from kio.index import load_response_schema

from ._wire import INT16, INT32, Incomplete, Malformed, read_uvarint, skip_tagged_fields

# A walk: yields steps (see the module docstring); returns when the tagged section starts.
Walk = Generator[int, Any, None]

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
_LENGTH_PREFIXED = ("string", "bytes", "records")


def unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """(X, True) for a kio field hint ``X | None``, else (hint, False)."""
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    name: str
    kafka_type: str | None  # None for struct fields
    entity: type | None  # struct type, for struct and struct-array fields
    array: bool
    nullable: bool


@cache
def layout(cls: type) -> tuple[tuple[Field, ...], frozenset[int]]:
    """Non-tagged fields of a kio entity in wire order, and its known tags."""
    fields: list[Field] = []
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
        if kafka_type is not None and kafka_type not in (*_FIXED_WIDTH, *_LENGTH_PREFIXED):
            raise TypeError(f"{cls.__name__}.{f.name}: unsupported kafka_type {kafka_type!r}")
        fields.append(Field(f.name, kafka_type, entity, array, nullable))  # type: ignore[arg-type]
    return tuple(fields), frozenset(tags)


# Plan steps: (_SKIP, width) | (_BLOB, classic length width) | (_ARRAY, field) | (_STRUCT, field)
_SKIP, _BLOB, _ARRAY, _STRUCT = range(4)


@cache
def _plan(cls: type) -> tuple[tuple[int, Any], ...]:
    """``layout(cls)`` as walk steps, adjacent fixed widths merged into one skip."""
    steps: list[tuple[int, Any]] = []
    for f in layout(cls)[0]:
        width = _FIXED_WIDTH.get(f.kafka_type or "")
        if f.array:
            steps.append((_ARRAY, f))
        elif f.entity is not None:
            steps.append((_STRUCT, f))
        elif width is not None:
            if steps and steps[-1][0] == _SKIP:
                steps[-1] = (_SKIP, steps[-1][1] + width)
            else:
                steps.append((_SKIP, width))
        else:
            steps.append((_BLOB, 2 if f.kafka_type == "string" else 4))
    return tuple(steps)


def _uvarint() -> Generator[int, Any, int]:
    value = shift = 0
    while True:
        byte = (yield 1)[0]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
        if shift > 28:
            raise Malformed("unsigned varint longer than 5 bytes")


def _length(flexible: bool, classic_width: int) -> Generator[int, Any, int]:
    """A length or count: compact (uvarint of n+1) or classic (int16/int32); -1 is null."""
    if flexible:
        return (yield from _uvarint()) - 1
    if classic_width == 2:
        return int(INT16.unpack((yield 2))[0])
    return int(INT32.unpack((yield 4))[0])


def _blob(flexible: bool, classic_width: int) -> Walk:
    length = yield from _length(flexible, classic_width)
    if length < -1:
        raise Malformed(f"negative length {length}")
    if length > 0:
        yield -length


def tagged_section() -> Walk:
    """Skip a tagged-field section: count, then tag, size and value of each."""
    count = yield from _uvarint()
    for _ in range(count):
        yield from _uvarint()  # tag
        size = yield from _uvarint()
        if size:
            yield -size


def _entity(cls: type) -> Walk:
    yield from fields(cls)
    if cls.__flexible__:  # type: ignore[attr-defined]
        yield from tagged_section()


def fields(cls: type, stop_before: str | None = None) -> Walk:
    """Skip the non-tagged fields of ``cls``; stop where its tagged section starts, or
    where the array or struct field ``stop_before`` starts."""
    flexible: bool = cls.__flexible__  # type: ignore[attr-defined]
    for kind, arg in _plan(cls):
        if kind in (_ARRAY, _STRUCT) and arg.name == stop_before:
            return
        if kind == _SKIP:
            yield -arg
        elif kind == _BLOB:
            yield from _blob(flexible, arg)
        else:
            yield from _compound(flexible, kind, arg)


def _compound(flexible: bool, kind: int, f: Field) -> Walk:
    """Skip one array or struct field."""
    if kind == _ARRAY:
        count = yield from _length(flexible, 4)
        if count < -1:
            raise Malformed(f"negative array length {count}")
        if count <= 0:
            return
        if f.entity is not None:
            for _ in range(count):
                yield from _entity(f.entity)
        elif f.kafka_type in _FIXED_WIDTH:
            yield -count * _FIXED_WIDTH[f.kafka_type]
        else:
            width = 2 if f.kafka_type == "string" else 4
            for _ in range(count):
                yield from _blob(flexible, width)
    else:  # _STRUCT
        if f.nullable and (yield 1)[0] == 0xFF:  # int8 -1: null struct (KIP-893)
            return
        yield from _entity(f.entity)  # type: ignore[arg-type]


def through_field(cls: type, name: str) -> Walk:
    """Skip the non-tagged fields of ``cls`` up to and including the array or struct
    field ``name``."""
    yield from fields(cls, stop_before=name)
    kind, f = next((k, a) for k, a in _plan(cls) if k in (_ARRAY, _STRUCT) and a.name == name)
    yield from _compound(cls.__flexible__, kind, f)  # type: ignore[attr-defined]


@cache
def response_schema(api_key: int, version: int) -> type:
    schema: type = load_response_schema(api_key, version)
    if not schema.__flexible__:  # type: ignore[attr-defined]
        raise ValueError(f"response {api_key} v{version} is not flexible: it has no tags")
    return schema


def tags_offset(
    api_key: int, version: int, body: bytes | bytearray | memoryview, start: int = 0
) -> int:
    """Where the top-level tagged section of the response body at ``start`` begins.

    Raises ``Incomplete`` when the body ends before that.
    """
    return _skip(_program(response_schema(api_key, version), None, False), body, start)


def field_offset(cls: type, name: str, body: bytes | bytearray | memoryview) -> int:
    """Where the top-level array or struct field ``name`` of the ``cls`` body starts."""
    if not any(f.name == name and (f.array or f.entity) for f in layout(cls)[0]):
        raise ValueError(f"{cls.__name__} has no array or struct field {name!r}")
    return _skip(_program(cls, name, False), body, 0)


def measure(cls: type, body: bytes | bytearray | memoryview) -> int:
    """The length of the ``cls`` entity at the start of ``body``, found by walking it.

    Raises ``Incomplete`` when ``body`` ends first, ``Malformed`` on an impossible
    length. The walk allocates nothing, and each array item costs at least one byte of
    ``body``, so it takes at most ``len(body)`` steps whatever lengths the bytes claim:
    run before a decoder that sizes its buffers from them (kio's native reader aborts
    the process when a claimed array length does not fit in memory).
    """
    return _skip(_program(cls, None, True), body, 0)


# -- the same walk over a body held whole ------------------------------------------------
#
# A body held whole needs no generator to pause in: the steps above run as plain loops
# over offsets. Same steps, same checks, same exceptions (test_walk.py holds
# the two to each other); five to eight times less CPU, which was most of what a gathered
# Produce v10+ or small Fetch v16+ response cost the gateway.

# Program steps: (kind, argument, the element's program or None).
_ARRAY_OF_ENTITIES, _ARRAY_OF_FIXED, _ARRAY_OF_BLOBS = 4, 5, 6
Program = tuple[bool, bool, tuple[tuple[int, int, Any], ...]]  # see _program


@cache
def _program(cls: type, stop_before: str | None, with_tags: bool) -> Program:
    """(flexible, with_tags, steps) of ``cls``'s fields, up to the field ``stop_before``
    if given; ``with_tags``: its tagged section too (an entity, as ``_entity``)."""
    flexible: bool = cls.__flexible__  # type: ignore[attr-defined]
    steps: list[tuple[int, int, Any]] = []
    for kind, arg in _plan(cls):
        if kind in (_SKIP, _BLOB):
            steps.append((kind, arg, None))
            continue
        if arg.name == stop_before:
            break
        if kind == _STRUCT:
            steps.append((_STRUCT, int(arg.nullable), _program(arg.entity, None, True)))
        elif arg.entity is not None:
            steps.append((_ARRAY_OF_ENTITIES, 0, _program(arg.entity, None, True)))
        elif arg.kafka_type in _FIXED_WIDTH:
            steps.append((_ARRAY_OF_FIXED, _FIXED_WIDTH[arg.kafka_type], None))
        else:
            steps.append((_ARRAY_OF_BLOBS, 2 if arg.kafka_type == "string" else 4, None))
    return flexible, with_tags, tuple(steps)


@cache
def tail_program(api_key: int, version: int) -> tuple[int, ...]:
    """``tags_offset``'s walk of a response body as flat integers, for the compiled lane
    (gateway/server/_lane.pyx), which runs it in C on the responses it forwards.

    A program is ``(flags, n, *steps)``: flags bit 0 flexible, bit 1 with a tagged section
    at the end; then ``n`` integers of steps, each ``(kind, argument)`` and, for a struct
    or an array of entities, the element's program right after. Kinds and arguments are
    ``_program``'s.
    """
    return _flat(_program(response_schema(api_key, version), None, False))


def _flat(program: Program) -> tuple[int, ...]:
    flexible, with_tags, steps = program
    out: list[int] = []
    for kind, arg, element in steps:
        out += (kind, arg)
        if element is not None:
            out += _flat(element)
    return (int(flexible) | int(with_tags) << 1, len(out), *out)


def _skip(program: Program, body: bytes | bytearray | memoryview, pos: int) -> int:
    """Walk ``program`` over ``body`` from ``pos``; return where it ends.

    Skips are checked against the end by the next read or on return (each array item
    returns through here): a claimed count costs at most ``len(body)`` items either way.
    """
    end = len(body)
    flexible, with_tags, steps = program
    for kind, arg, element in steps:
        if kind == _SKIP:
            pos += arg  # checked by the next read, or at the end
            continue
        if kind == _BLOB:
            if flexible and pos < end and body[pos] < 0x80:  # a one-byte varint, inline:
                pos += max(body[pos], 1)  # length + 1, then the bytes (0: null, 1: empty)
            else:
                pos = _skip_blob(body, pos, end, flexible, arg)
            continue
        if kind == _STRUCT:
            if arg:  # nullable: a presence byte, int8 -1 for null (KIP-893)
                if pos >= end:
                    raise Incomplete
                pos += 1
                if body[pos - 1] == 0xFF:
                    continue
            pos = _skip(element, body, pos)
            continue
        if flexible and pos < end and body[pos] < 0x80:
            count = body[pos] - 1
            pos += 1
        else:
            count, pos = _read_length(body, pos, end, flexible, 4)
        if count < -1:
            raise Malformed(f"negative array length {count}")
        if count <= 0:
            continue
        if kind == _ARRAY_OF_FIXED:
            pos += count * arg
            continue
        if kind == _ARRAY_OF_ENTITIES:
            for _ in range(count):
                pos = _skip(element, body, pos)
            continue
        for _ in range(count):  # _ARRAY_OF_BLOBS
            pos = _skip_blob(body, pos, end, flexible, arg)
    if with_tags and flexible:
        if pos < end and body[pos] == 0:  # no tagged fields, the common case
            return pos + 1
        pos = skip_tagged_fields(body, pos)
    if pos > end:
        raise Incomplete
    return pos


def _skip_blob(
    body: bytes | bytearray | memoryview, pos: int, end: int, flexible: bool, classic_width: int
) -> int:
    """The position after the string, bytes or records at ``pos`` (see ``_blob``)."""
    length, pos = _read_length(body, pos, end, flexible, classic_width)
    if length < -1:
        raise Malformed(f"negative length {length}")
    return pos + length if length > 0 else pos


def _read_length(
    body: bytes | bytearray | memoryview, pos: int, end: int, flexible: bool, classic_width: int
) -> tuple[int, int]:
    """A length or count at ``pos`` (see ``_length``) and the position after it."""
    if flexible:
        value, pos = read_uvarint(body, pos)
        return value - 1, pos
    if pos + classic_width > end:
        raise Incomplete
    if classic_width == 2:
        return INT16.unpack_from(body, pos)[0], pos + 2
    return INT32.unpack_from(body, pos)[0], pos + 4
