"""Test-side Kafka encoding, written independently of ``gateway.protocol``.

Bodies are encoded with kio (Kafka's own schemas); headers, strings and tagged-field
sections are built by hand here so that the code under test is never used to produce
its own expected values.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import importlib
import io
import struct
import typing
import uuid
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def classic_string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def tagged_section(fields: dict[int, bytes] | None = None) -> bytes:
    fields = fields or {}
    out = uvarint(len(fields))
    for tag in sorted(fields):
        out += uvarint(tag) + uvarint(len(fields[tag])) + fields[tag]
    return out


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def schema_module(api: str, version: int, kind: str) -> ModuleType:
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


def top_level(module: ModuleType) -> type:
    """The request/response class of a kio schema module."""
    for value in vars(module).values():
        entity_type = getattr(value, "__type__", None)
        if (
            isinstance(value, type)
            and value.__module__ == module.__name__
            and entity_type in (EntityType.request, EntityType.response)
        ):
            return value
    raise LookupError(module.__name__)


def encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def decode(cls: type, data: bytes) -> Any:
    entity, size = entity_reader(cls)(data, 0)
    assert size == len(data), f"{cls.__name__}: decoded {size} of {len(data)} bytes"
    return entity


@dataclass(frozen=True)
class Req:
    """A request frame as a client sends it, with the facts a reader must find in it."""

    key: int
    version: int
    correlation_id: int
    client_id: str | None
    header_len: int
    frame: bytes
    expects_response: bool


def request(
    key: int,
    version: int,
    correlation_id: int,
    body: bytes,
    *,
    header_version: int,
    client_id: str | None = "gw-test",
    tagged: dict[int, bytes] | None = None,
    expects_response: bool = True,
) -> Req:
    header = struct.pack(">hhi", key, version, correlation_id)
    if header_version >= 1:
        header += classic_string(client_id)
    if header_version >= 2:
        header += tagged_section(tagged)
    return Req(
        key,
        version,
        correlation_id,
        client_id if header_version >= 1 else None,
        len(header),
        frame(header + body),
        expects_response,
    )


def kio_request(
    api: str,
    version: int,
    correlation_id: int,
    *,
    client_id: str | None = "gw-test",
    tagged: dict[int, bytes] | None = None,
    expects_response: bool = True,
    **fields: Any,
) -> Req:
    """A request whose body kio encodes; the header version is the one kio's schema names."""
    cls = top_level(schema_module(api, version, "request"))
    return request(
        cls.__api_key__,
        version,
        correlation_id,
        encode(cls(**fields)),
        header_version=cls.__header_schema__.__version__,
        client_id=client_id,
        tagged=tagged,
        expects_response=expects_response,
    )


@dataclass(frozen=True)
class Resp:
    key: int
    version: int
    correlation_id: int
    header_len: int
    frame: bytes


def kio_response(correlation_id: int, entity: Any) -> Resp:
    """A response frame; the header version is the one kio's schema names."""
    cls = type(entity)
    version = cls.__version__
    header = struct.pack(">i", correlation_id)
    if cls.__header_schema__.__version__ >= 1:
        header += tagged_section()
    return Resp(
        cls.__api_key__, version, correlation_id, len(header), frame(header + encode(entity))
    )


RECORDS = bytes(range(256))[:200]  # opaque record-batch bytes; the core never looks inside


def produce(
    version: int,
    correlation_id: int,
    *,
    acks: int,
    transactional_id: str | None,
    client_id: str | None = "producer-1",
    tagged: dict[int, bytes] | None = None,
    records: bytes = RECORDS,
) -> Req:
    module = schema_module("produce", version, "request")
    # Produce v13 names topics by id (KIP-516), older versions by name.
    topic_key: dict[str, Any] = (
        {"topic_id": uuid.UUID(int=7)}
        if "topic_id" in module.TopicProduceData.__dataclass_fields__
        else {"name": "orders"}
    )
    topic = module.TopicProduceData(
        **topic_key,
        partition_data=(module.PartitionProduceData(index=0, records=records),),
    )
    return kio_request(
        "produce",
        version,
        correlation_id,
        client_id=client_id,
        tagged=tagged,
        expects_response=acks != 0,
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=1500),
        topic_data=(topic,),
    )


def build(cls: type, **values: Any) -> Any:
    """Build a kio entity: given fields as passed (lists of dicts become nested entities),
    required fields left out get a blank value (0, "", empty tuple, None, ...)."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            kwargs[f.name] = _coerce(hints[f.name], values.pop(f.name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = _blank(hints[f.name])
    if values:
        raise TypeError(f"{cls.__qualname__} has no fields {sorted(values)}")
    return cls(**kwargs)


def nested(cls: type, field_name: str) -> type:
    """The entity class of a (tuple or single) nested field."""
    hint = _strip_none(typing.get_type_hints(cls)[field_name])
    if typing.get_origin(hint) is tuple:
        hint = typing.get_args(hint)[0]
    assert dataclasses.is_dataclass(hint), hint
    return hint


def _strip_none(hint: Any) -> Any:
    args = typing.get_args(hint)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint


def _coerce(hint: Any, value: Any) -> Any:
    inner = _strip_none(hint)
    if typing.get_origin(inner) is tuple and isinstance(value, list):
        (element, *_) = typing.get_args(inner)
        if dataclasses.is_dataclass(element):
            return tuple(v if not isinstance(v, dict) else build(element, **v) for v in value)
        return tuple(value)
    if dataclasses.is_dataclass(inner) and isinstance(value, dict):
        return build(inner, **value)
    return value


def _blank(hint: Any) -> Any:
    if type(None) in typing.get_args(hint):
        return None
    if typing.get_origin(hint) is tuple:
        return ()
    if dataclasses.is_dataclass(hint):
        return build(hint)
    if isinstance(hint, type):
        if issubclass(hint, enum.Enum):
            return hint(0)
        if issubclass(hint, bool):
            return False
        if issubclass(hint, int):
            return 0
        if issubclass(hint, float):
            return 0.0
        if issubclass(hint, str):
            return ""
        if issubclass(hint, bytes):
            return b""
        if issubclass(hint, uuid.UUID):
            return uuid.UUID(int=0)
        if issubclass(hint, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(hint, datetime.datetime):
            return datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    raise TypeError(f"no blank value for {hint!r}")
