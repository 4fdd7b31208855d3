"""UNSUPPORTED_VERSION answers for known APIs at versions the gateway does not advertise.

A client that sends a version outside the advertised range (an old client pinned high,
or a version a feature level withholds) gets an error it can act on, instead of Kafka's
closed connection: a response **in the requested version's schema** with
UNSUPPORTED_VERSION (35) in every error-code field that applies. The connection stays
usable. Nothing of the request reaches the upstream.

The response is built generically from kio's dataclasses, so every API and version kio
knows is covered without a table per API:

* every ``error_code`` field (at any level) is 35; a top-level ``error_message`` says why;
* lists of per-item results (topics, partitions, groups, coordinator keys, config
  resources...) mirror the request: a response list is paired with the request list
  whose elements can supply its *identifier* fields (topic name/id, partition index,
  group id, coordinator key, resource type/name...), and each request item becomes a
  response item carrying those identifiers and error 35. So a producer sees error 35
  on each partition it produced to, and a Metadata client on each topic it asked for.
  Lists that echo nothing (Metadata brokers, ...) stay empty;
* other fields take the schema default, else the "none" value Kafka uses in its own
  error responses (-1 for node, leader, producer ids, epochs, offsets, ports and
  timestamps; 0, "", false, empty otherwise). Tagged fields stay at their defaults.

The one per-API rule: a Produce request with acks=0 gets no response at all, so none is
built (the caller closes the connection, which is what Kafka does when such a produce
fails). ``None`` is also returned when the request does not decode or the response
cannot be built; the caller then closes the connection, as Kafka does.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial.readers import tz_aware_from_i64
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta, i64, i64Timedelta

from ..protocol import (
    PRODUCE,
    RequestHeader,
    api_spec,
    decode_request,
    encode_response,
    has_schema,
    response_header,
    response_schema,
    unwrap_optional,
)

UNSUPPORTED_VERSION = ErrorCode.unsupported_version

# Identifier fields a response item can take from the request item it answers; names in
# one group are interchangeable (Produce calls a partition "index", Fetch requests
# "partition", most responses "partition_index").
_ID_GROUPS: tuple[frozenset[str], ...] = (
    frozenset({"name", "topic", "topic_name"}),
    frozenset({"partition_index", "partition", "index", "partition_id"}),
    frozenset({"topic_id"}),
    frozenset({"group_id"}),
    frozenset({"key"}),
    frozenset({"transactional_id"}),
    frozenset({"resource_type"}),
    frozenset({"resource_name"}),
    frozenset({"member_id"}),
)
# For a request list of plain values (e.g. FindCoordinator's coordinator_keys, OffsetFetch's
# partition_indexes), the word its name must contain to feed a given identifier.
_STEMS: dict[frozenset[str], tuple[str, ...]] = {
    _ID_GROUPS[0]: ("topic", "name"),
    _ID_GROUPS[1]: ("partition",),
    _ID_GROUPS[3]: ("group",),
    _ID_GROUPS[4]: ("key",),
    _ID_GROUPS[5]: ("transactional",),
}
# Integer fields whose "nothing here" value is -1 in Kafka's own error responses.
_MINUS_ONE_SUFFIXES = (
    "node_id",
    "leader_id",
    "controller_id",
    "broker_id",
    "coordinator_id",
    "producer_id",
    "generation_id",
    "_epoch",
    "offset",
    "watermark",
    "timestamp",
    "port",
)
_INT_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldInfo:
    name: str
    kafka_type: str | None
    element: Any  # element type of a tuple field, or the field type
    entity: bool  # element is a kio dataclass
    array: bool
    optional: bool
    tagged: bool
    default: Any  # dataclasses.MISSING when the schema has none


@cache
def _fields(cls: type) -> tuple[_FieldInfo, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint, optional = unwrap_optional(hints[f.name])
        array = typing.get_origin(hint) is tuple
        element = typing.get_args(hint)[0] if array else hint
        element, _ = unwrap_optional(element)
        out.append(
            _FieldInfo(
                name=f.name,
                kafka_type=f.metadata.get("kafka_type"),
                element=element,
                entity=dataclasses.is_dataclass(element),
                array=array,
                optional=optional,
                tagged="tag" in f.metadata,
                default=f.default,
            )
        )
    return tuple(out)


def _id_group(name: str) -> frozenset[str] | None:
    return next((g for g in _ID_GROUPS if name in g), None)


def _primitive_default(info: _FieldInfo, sensible: bool) -> Any:
    kafka_type = info.kafka_type
    element = info.element
    if kafka_type == "error_code":
        return ErrorCode.none
    if kafka_type in _INT_TYPES:
        value = -1 if sensible and info.name.endswith(_MINUS_ONE_SUFFIXES) else 0
        if value < 0 and kafka_type.startswith("uint"):
            value = 0
        return element(value)
    if kafka_type == "bool":
        return False
    if kafka_type == "string":
        return element("")
    if kafka_type in ("bytes", "records"):
        return element(b"")
    if kafka_type == "float64":
        return element(0.0)
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type == "timedelta_i32":
        return i32Timedelta.parse(datetime.timedelta(0))
    if kafka_type == "timedelta_i64":
        return i64Timedelta.parse(datetime.timedelta(0))
    if kafka_type == "datetime_i64":
        # Kafka writes -1 ("no time") here, but kio refuses to read negative timestamps
        # back; the epoch is just as clearly "nothing" and every reader accepts it.
        return tz_aware_from_i64(i64(0))
    raise TypeError(f"no default for kafka_type {kafka_type!r}")


def _default(info: _FieldInfo, sensible: bool) -> Any:
    """A field's value when nothing from the request applies."""
    if info.default is not dataclasses.MISSING:
        return info.default
    if info.optional:
        return None
    if info.array:
        return ()
    if info.entity:
        return _build(info.element, None, sensible=sensible)
    return _primitive_default(info, sensible)


def _build(cls: type, source: Any, *, sensible: bool = True) -> Any:
    """An instance of response entity ``cls`` answering request entity ``source``."""
    source_fields = {f.name: f for f in _fields(type(source))} if source is not None else {}
    values: dict[str, Any] = {}
    for info in _fields(cls):
        if info.tagged:
            # kio leaves tagged fields out when they hold their default: keep them out.
            values[info.name] = _default(info, sensible=False)
        elif info.kafka_type == "error_code":
            values[info.name] = UNSUPPORTED_VERSION
        elif info.array and info.entity and source is not None:
            values[info.name] = _mirror(info, source, source_fields)
        elif not info.array and not info.entity and source is not None:
            copied = _copy_identifier(info, source, source_fields)
            values[info.name] = copied if copied is not None else _default(info, sensible)
        else:
            values[info.name] = _default(info, sensible)
    return cls(**values)


def _copy_identifier(info: _FieldInfo, source: Any, source_fields: dict[str, _FieldInfo]) -> Any:
    group = _id_group(info.name)
    if group is None:
        return None
    for name in (info.name, *sorted(group)):
        other = source_fields.get(name)
        if other is None or other.array or other.kafka_type != info.kafka_type:
            continue
        value = getattr(source, name)
        if value is None and not info.optional:
            return None
        return value
    return None


def _identifier_fields(cls: type) -> list[_FieldInfo]:
    return [
        f
        for f in _fields(cls)
        if not f.array and not f.entity and not f.tagged and _id_group(f.name) is not None
    ]


@cache
def _carries_errors(cls: type) -> bool:
    """True when items of ``cls`` (or lists inside them) have an error-code field."""
    return any(
        f.kafka_type == "error_code" or (f.entity and f.array and _carries_errors(f.element))
        for f in _fields(cls)
        if not f.tagged
    )


def _mirror(info: _FieldInfo, source: Any, source_fields: dict[str, _FieldInfo]) -> tuple:
    """The response list ``info`` rebuilt from the request list its items answer.

    Only lists that can carry an error are mirrored: echoing e.g. the configs of a
    CreateTopics request would report nothing and only look like a result.
    """
    ids = _identifier_fields(info.element)
    if not ids or not _carries_errors(info.element):
        return ()
    best: tuple[int, int, str] | None = None
    for candidate in source_fields.values():
        if not candidate.array or candidate.tagged or getattr(source, candidate.name) is None:
            continue
        if candidate.entity:
            own = {f.name for f in _fields(candidate.element)}
            score = sum(1 for f in ids if own & (_id_group(f.name) or set()))
        else:
            score = int(_plain_list_feeds(candidate, ids) is not None)
        if score:
            rank = (int(candidate.name == info.name), score, candidate.name)
            if best is None or rank > best:
                best = rank
    if best is None:
        return ()
    candidate = source_fields[best[2]]
    items = getattr(source, candidate.name)
    if candidate.entity:
        return tuple(_build(info.element, item) for item in items)
    target = _plain_list_feeds(candidate, ids)
    assert target is not None
    return tuple(_build_from_value(info.element, target, value) for value in items)


def _plain_list_feeds(candidate: _FieldInfo, ids: list[_FieldInfo]) -> _FieldInfo | None:
    """The one identifier a request list of plain values can fill, if any."""
    matches = []
    for f in ids:
        group = _id_group(f.name)
        stems = _STEMS.get(group) if group is not None else None
        if (
            stems
            and f.kafka_type == candidate.kafka_type
            and any(stem in candidate.name for stem in stems)
        ):
            matches.append(f)
    return matches[0] if len(matches) == 1 else None


def _build_from_value(cls: type, target: _FieldInfo, value: Any) -> Any:
    item = _build(cls, None)
    return dataclasses.replace(item, **{target.name: value})


def _error_message(key: int, version: int) -> str:
    spec = api_spec(key)
    name = spec.name if spec is not None else f"api key {key}"
    return f"{name} v{version} is not supported here; send ApiVersions to learn the supported range"


def build_unsupported_response(header: RequestHeader, body: bytes | memoryview) -> Any | None:
    """The kio response object (not yet encoded), or None when none can be built."""
    key, version = header.api_key, header.api_version
    if api_spec(key) is None or not has_schema(key, version, EntityType.response):
        return None
    request = None
    if has_schema(key, version, EntityType.request):
        try:
            request = decode_request(key, version, body)
        except Exception:  # kio raises assorted errors on malformed bodies
            return None
    if key == PRODUCE and request is not None and request.acks == 0:
        return None  # acks=0 expects no response; Kafka closes the connection instead
    schema = response_schema(key, version)
    response = _build(schema, request)
    if any(f.name == "error_message" and not f.tagged for f in _fields(schema)):
        response = dataclasses.replace(response, error_message=_error_message(key, version))
    return response


def unsupported_version_response(header: RequestHeader, body: bytes | memoryview) -> bytes | None:
    """Response payload (header + body, unframed) answering with UNSUPPORTED_VERSION.

    For a known API key at a version kio has a schema for; ``body`` is the request body
    after its header. None when no response can be built (unknown key or version,
    undecodable request, Produce with acks=0): the caller must close the connection.
    """
    try:
        response = build_unsupported_response(header, body)
        if response is None:
            return None
        encoded = encode_response(response)
    except Exception:  # any schema kio cannot round-trip: fall back to closing
        return None
    spec = api_spec(header.api_key)
    assert spec is not None
    return (
        response_header(header.correlation_id, spec.response_header_version(header.api_version))
        + encoded
    )


__all__ = [
    "UNSUPPORTED_VERSION",
    "build_unsupported_response",
    "unsupported_version_response",
]
