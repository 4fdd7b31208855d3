"""Walking a Kafka body along its schema: to where its top-level tagged section starts,
to one of its fields, or to its end.

Why: Kafka puts fields that name brokers (KIP-951's NodeEndpoints in Produce v10+ and
Fetch v16+ responses) into the *last* part of a body, the top-level tagged section, and
where that section starts can only be found by walking every field before it. The walk
follows ``kio``'s generated schema (Kafka's message JSON files) and only *measures*:
values are never decoded, records are skipped by their length, so it works on bytes from
any encoder, canonical or not.

A schema is compiled once into a *program* (``_program``): a tuple of steps, adjacent
fixed-width fields merged into one skip, so a Fetch partition costs about seven steps
whatever its record bytes. One loop (``walk``) runs programs, and it is resumable: its
state is a frame per level of nesting (the steps left to run, how many more items of
the array it is in, the frame it returns to), so the same loop serves a body held whole
(``tags_offset``, ``field_offset``, ``measure``: one call) and a 100 MiB Fetch streaming
past in socket-sized chunks (``TailFinder``, ``HeadFinder`` in ``_finders``: one call a
chunk), which is never gathered. Each step reads a few bytes (a length, a count, a
presence byte, a tag's number and size) and then skips; when a read would cross the end
of the bytes at hand, the walk stops at the start of that step and resumes there, so the
caller keeps at most those few bytes. When a skip runs past the end, the walk stops at
the next read with its position beyond the end: the caller skips that much of what
follows. A response header v1's tagged section (``after_header``) and "through a field"
(``_program``'s ``through``) are steps and programs too, so the finders need no walk of
their own.

The frames are tuples linked to their parent and the steps left are an iterator, not a
list and an index: a whole Produce v10+ or small Fetch v16+ response is walked on every
request, and this form costs no more than plain recursion (bench/walk_bench.py).

The scanner walks the same programs, flattened (``tail_program``,
``_scan.walk_tail``), compiled and as plain Python alike.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable
from functools import cache
from itertools import chain
from typing import Any

from ._apis import response_schema as codec_schema
from ._wire import INT16, INT32, Incomplete, Malformed, read_uvarint

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


# Step kinds; a step is (kind, argument, the element's program or None). 0-6 are also the
# C walk's (``tail_program``); 2 is unused.
_SKIP = 0  # skip ``argument`` bytes of fixed-width fields
_BLOB = 1  # a string, bytes or records; argument: its classic length's width (2 or 4)
_STRUCT = 3  # a struct; argument 1 when nullable (a presence byte first, KIP-893)
_ARRAY_OF_ENTITIES = 4
_ARRAY_OF_FIXED = 5  # argument: the item's width
_ARRAY_OF_BLOBS = 6  # argument: as _BLOB's; element: a program of one _BLOB
_TAGS = 7  # a tagged section: its count (uvarint), then as many _TAG_FIELDs
_TAG_FIELD = 8  # one tagged field: tag (uvarint), size (uvarint), value

Step = tuple[int, int, Any]
# (flexible, with_tags, steps); with_tags: the steps end with the entity's tagged section
# (a _TAGS step; ``tail_program`` writes it as a flag, as the C walk reads it).
Program = tuple[bool, bool, tuple[Step, ...]]
# Where a walk is: (the steps it runs, those it has yet to run, how many more times to
# run them all (the items of an array left), flexible, the frame it returns to or None).
Frame = tuple[tuple[Step, ...], Iterable[Step], int, bool, Any]

_TAGS_STEP: Step = (_TAGS, 0, None)
_TAG_FIELDS: tuple[Step, ...] = ((_TAG_FIELD, 0, None),)


@cache
def _program(
    cls: type, stop: str | None = None, with_tags: bool = False, through: bool = False
) -> Program:
    """``cls``'s non-tagged fields as steps, up to the array or struct field ``stop`` if
    given (``through``: including it); ``with_tags``: its tagged section too (an entity
    within a body, or a whole request)."""
    flexible: bool = cls.__flexible__  # type: ignore[attr-defined]
    steps: list[Step] = []
    for f in layout(cls)[0]:
        if f.array or f.entity is not None:
            if f.name == stop and not through:
                break
            steps.append(_compound(flexible, f))
            if f.name == stop:
                break
            continue
        width = _FIXED_WIDTH.get(f.kafka_type or "")
        if width is None:
            steps.append((_BLOB, 2 if f.kafka_type == "string" else 4, None))
        elif steps and steps[-1][0] == _SKIP:
            steps[-1] = (_SKIP, steps[-1][1] + width, None)
        else:
            steps.append((_SKIP, width, None))
    if with_tags and flexible:
        steps.append(_TAGS_STEP)
    return flexible, with_tags, tuple(steps)


def _compound(flexible: bool, f: Field) -> Step:
    """The step of the array or struct field ``f``."""
    if not f.array:
        return _STRUCT, int(f.nullable), _program(f.entity, None, True)  # type: ignore[arg-type]
    if f.entity is not None:
        return _ARRAY_OF_ENTITIES, 0, _program(f.entity, None, True)
    if f.kafka_type in _FIXED_WIDTH:
        return _ARRAY_OF_FIXED, _FIXED_WIDTH[f.kafka_type], None
    width = 2 if f.kafka_type == "string" else 4
    return _ARRAY_OF_BLOBS, width, (flexible, False, ((_BLOB, width, None),))


def after_header(program: Program) -> Program:
    """``program`` preceded by a response header v1's tagged section."""
    flexible, with_tags, steps = program
    return flexible, with_tags, (_TAGS_STEP, *steps)


def begin(program: Program) -> Frame:
    """The frame that starts a walk of ``program``."""
    flexible, _, steps = program
    return steps, steps, 0, flexible, None


_TAGGED_SECTION: Frame = begin((True, False, (_TAGS_STEP,)))


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """Skip the tagged-field section at ``pos`` (count, then tag, size and value each);
    return where it ends. Raises ``Incomplete`` when ``buf`` ends first."""
    if pos < len(buf) and buf[pos] == 0:  # no tagged fields: most headers and entities
        return pos + 1
    return walk(_TAGGED_SECTION, buf, pos, len(buf))


@cache
def response_schema(api_key: int, version: int) -> type:
    schema: type = codec_schema(api_key, version)
    if not schema.__flexible__:  # type: ignore[attr-defined]
        raise ValueError(f"response {api_key} v{version} is not flexible: it has no tags")
    return schema


@cache
def _tail_frame(api_key: int, version: int) -> Frame:
    return begin(_program(response_schema(api_key, version)))


def tags_offset(
    api_key: int, version: int, body: bytes | bytearray | memoryview, start: int = 0
) -> int:
    """Where the top-level tagged section of the response body at ``start`` begins.

    Raises ``Incomplete`` when the body ends before that.
    """
    return walk(_tail_frame(api_key, version), body, start, len(body))


def field_offset(cls: type, name: str, body: bytes | bytearray | memoryview) -> int:
    """Where the top-level array or struct field ``name`` of the ``cls`` body starts."""
    if not any(f.name == name and (f.array or f.entity) for f in layout(cls)[0]):
        raise ValueError(f"{cls.__name__} has no array or struct field {name!r}")
    return walk(begin(_program(cls, name)), body, 0, len(body))


@cache
def _entity_frame(cls: type) -> Frame:
    return begin(_program(cls, None, True))


def measure(cls: type, body: bytes | bytearray | memoryview) -> int:
    """The length of the ``cls`` entity at the start of ``body``, found by walking it.

    Raises ``Incomplete`` when ``body`` ends first, ``Malformed`` on an impossible
    length. The walk holds a frame per level of nesting, nothing that grows with what
    the bytes claim, and each array item costs at least one byte of ``body``, so it
    takes at most ``len(body)`` steps whatever lengths the bytes claim: run before a
    decoder that sizes its buffers from them (kio's native reader aborts the process when
    a claimed array length does not fit in memory).
    """
    return walk(_entity_frame(cls), body, 0, len(body))


@cache
def tail_program(api_key: int, version: int) -> tuple[int, ...]:
    """``tags_offset``'s walk of a response body as flat integers, for the compiled lane
    (gateway/server/_lane.pyx), which runs it in C on the responses it forwards.

    A program is ``(flags, n, *steps)``: flags bit 0 flexible, bit 1 with a tagged section
    at the end; then ``n`` integers of steps, each ``(kind, argument)`` and, for a struct
    or an array of entities, the element's program right after. Kinds and arguments are
    ``_program``'s.
    """
    return _flat(_program(response_schema(api_key, version)))


def _flat(program: Program) -> tuple[int, ...]:
    flexible, with_tags, steps = program
    out: list[int] = []
    for kind, arg, element in steps:
        if kind == _TAGS:  # the entity's own section: flags bit 1
            continue
        out += (kind, arg)
        if kind in (_STRUCT, _ARRAY_OF_ENTITIES):
            out += _flat(element)
    return (int(flexible) | int(with_tags) << 1, len(out), *out)


def walk(
    frame: Frame,
    buf: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    stopped: list[Frame] | None = None,
) -> int:
    """Run the walk from ``frame`` over ``buf`` from ``pos`` as far as ``buf[:end]``
    allows; return where it ended.

    Where the bytes run out first it stops; with ``stopped`` None it raises
    ``Incomplete``, else it appends to ``stopped`` the frame to resume from (pass it with
    the bytes from that position on) and returns where it stopped:

    * at the start of a step whose read would cross ``end`` (at most 10 bytes before it);
    * beyond ``end``, after a skip that ran past it, at the next read or at the end of an
      array item: the walk goes on that far into the bytes that follow. Checking at each
      item's end makes a claimed count cost at most one item per byte.

    Raises ``Malformed`` on an impossible length.
    """
    steps, it, left, flexible, parent = frame
    it = iter(it)
    step = None
    try:
        while True:
            for step in it:
                kind, arg, element = step
                if kind == _SKIP:
                    pos += arg  # checked by the next read, or at the item's end
                elif kind == _BLOB:
                    if flexible and pos < end and buf[pos] < 0x80:  # a one-byte varint:
                        pos += buf[pos] or 1  # length + 1, then the bytes (0: null, 1: empty)
                    else:
                        length, at = _read_length(buf, pos, end, flexible, arg)
                        if length < -1:
                            raise Malformed(f"negative length {length}")
                        pos = at + length if length > 0 else at
                elif kind == _TAGS:
                    if pos < end and buf[pos] == 0:  # no tagged fields, the common case
                        pos += 1
                    else:
                        count, pos = read_uvarint(buf, pos, end)
                        if count:
                            parent = (steps, it, left, flexible, parent)
                            steps = _TAG_FIELDS
                            left = count - 1
                            it = iter(steps)
                            break
                elif kind < _TAGS:  # a struct or an array
                    if kind == _STRUCT:
                        if arg:  # nullable: a presence byte, int8 -1 for null (KIP-893)
                            if pos >= end:
                                raise Incomplete
                            pos += 1
                            if buf[pos - 1] == 0xFF:
                                continue
                        parent = (steps, it, left, flexible, parent)
                        flexible, _, steps = element
                        left = 0
                        it = iter(steps)
                        break
                    if flexible and pos < end and buf[pos] < 0x80:
                        count = buf[pos] - 1
                        at = pos + 1
                    else:
                        count, at = _read_length(buf, pos, end, flexible, 4)
                    if count < -1:
                        raise Malformed(f"negative array length {count}")
                    pos = at
                    if count > 0:
                        if kind == _ARRAY_OF_FIXED:
                            pos += count * arg
                        else:
                            parent = (steps, it, left, flexible, parent)
                            flexible, _, steps = element
                            left = count - 1
                            it = iter(steps)
                            break
                else:  # _TAG_FIELD
                    _, at = read_uvarint(buf, pos, end)
                    size, at = read_uvarint(buf, at, end)
                    pos = at + size
            else:  # the steps ran out: an entity ended, or an item of an array
                if pos > end:
                    step = None
                    raise Incomplete
                if left:
                    left -= 1
                    it = iter(steps)
                elif parent is not None:
                    steps, it, left, flexible, parent = parent
                else:
                    return pos
    except Incomplete:  # a read crossed ``end``: ``pos`` is where its ``step`` starts
        if stopped is None:
            raise
        if step is not None:
            it = chain((step,), it)
    stopped.append((steps, it, left, flexible, parent))
    return pos


def _read_length(
    body: bytes | bytearray | memoryview, pos: int, end: int, flexible: bool, classic_width: int
) -> tuple[int, int]:
    """A length or count at ``pos`` and the position after it: compact (uvarint of n+1)
    or classic (int16/int32); -1 is null."""
    if flexible:
        value, pos = read_uvarint(body, pos, end)
        return value - 1, pos
    if pos + classic_width > end:
        raise Incomplete
    if classic_width == 2:
        return INT16.unpack_from(body, pos)[0], pos + 2
    return INT32.unpack_from(body, pos)[0], pos + 4
