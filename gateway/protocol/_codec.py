"""Whole-message decode/encode through ``kio`` — the only place interceptors touch bytes."""

from __future__ import annotations

import dataclasses
import io
import typing
from functools import cache
from typing import Any

from kio.serial import entity_reader, entity_writer
from kio.serial.readers import compact_array_reader, legacy_array_reader
from kio.serial.writers import compact_array_writer, legacy_array_writer

from ._apis import request_schema, response_schema
from ._walk import measure, unwrap_optional
from ._wire import Incomplete, Malformed

__all__ = [
    "decode_request",
    "decode_response",
    "decode_response_tag",
    "encode_request",
    "encode_response",
    "encode_response_tag",
    "readonly",
    "response_array_codec",
    "unwrap_optional",
]


@cache
def _response_codec(api_key: int, version: int) -> tuple[Any, Any]:
    schema = response_schema(api_key, version)
    return entity_reader(schema), entity_writer(schema)


@cache
def _request_codec(api_key: int, version: int) -> tuple[Any, Any]:
    schema = request_schema(api_key, version)
    return entity_reader(schema), entity_writer(schema)


def readonly(buf: bytes | bytearray | memoryview) -> bytes | memoryview:
    """``buf`` as kio's native readers take it: they refuse writable buffers (a frame
    gathered into a bytearray), and a read-only view costs no copy."""
    return buf if isinstance(buf, bytes) else memoryview(buf).toreadonly()


def decode_response(
    api_key: int, version: int, body: bytes | memoryview, *, exact: bool = False
) -> Any:
    """kio's decode of a response body; with ``exact``, bytes left over are an error."""
    reader, _ = _response_codec(api_key, version)
    entity, size = reader(readonly(body), 0)
    if exact and size != len(body):
        raise ValueError(f"response {api_key} v{version}: {len(body) - size} bytes after its end")
    return entity


def encode_response(entity: Any) -> bytes:
    _, writer = _response_codec(entity.__api_key__, entity.__version__)
    buf = io.BytesIO()
    writer(buf, entity)
    return buf.getvalue()


def decode_request(api_key: int, version: int, body: bytes | memoryview) -> Any:
    """kio's decode of a request body from a client.

    Walked first (``measure``): kio's native reader allocates what an array length
    claims, and a client claiming 2**31-1 items made the gateway abort (found by
    bench/fuzz_gateway.py). Raises ValueError when the walk fails.
    """
    try:
        measure(request_schema(api_key, version), body)
    except (Incomplete, Malformed) as exc:
        raise ValueError(f"request {api_key} v{version} does not fit its schema: {exc!r}") from None
    reader, _ = _request_codec(api_key, version)
    entity, _size = reader(body, 0)
    return entity


def encode_request(entity: Any) -> bytes:
    _, writer = _request_codec(entity.__api_key__, entity.__version__)
    buf = io.BytesIO()
    writer(buf, entity)
    return buf.getvalue()


def _array_codec(schema: type, field: dataclasses.Field[Any]) -> tuple[Any, Any]:
    """kio reader and writer of an array-of-structs field (tagged ones are compact)."""
    hint = typing.get_type_hints(schema)[field.name]
    args = typing.get_args(hint)
    if typing.get_origin(hint) is not tuple or not dataclasses.is_dataclass(args[0]):
        raise TypeError(f"{schema.__name__}.{field.name} is not an array of structs")
    item: Any = args[0]
    if schema.__flexible__:  # type: ignore[attr-defined]
        return compact_array_reader(entity_reader(item)), compact_array_writer(entity_writer(item))
    return legacy_array_reader(entity_reader(item)), legacy_array_writer(entity_writer(item))


@cache
def _tag_codec(api_key: int, version: int, tag: int) -> tuple[Any, Any]:
    """kio reader and writer of the value of a top-level tagged field of a response."""
    schema = response_schema(api_key, version)
    for f in dataclasses.fields(schema):
        if f.metadata.get("tag") == tag:
            return _array_codec(schema, f)
    raise KeyError(f"response {api_key} v{version} has no tag {tag}")


@cache
def response_array_codec(api_key: int, version: int, name: str) -> tuple[Any, Any]:
    """kio (reader, writer) of the top-level array-of-structs field ``name`` of a
    response. The reader returns (items, bytes read); the writer takes (buffer, items)."""
    schema = response_schema(api_key, version)
    for f in dataclasses.fields(schema):
        if f.name == name and "tag" not in f.metadata:
            return _array_codec(schema, f)
    raise KeyError(f"response {api_key} v{version} has no field {name}")


def decode_response_tag(api_key: int, version: int, tag: int, raw: bytes) -> tuple[Any, ...]:
    """The value of an array-of-structs tagged field (e.g. NodeEndpoints) from its bytes."""
    reader, _ = _tag_codec(api_key, version, tag)
    items, size = reader(raw, 0)
    if size != len(raw):
        raise ValueError(f"tag {tag}: {len(raw) - size} bytes after its value")
    return tuple(items or ())


def encode_response_tag(api_key: int, version: int, tag: int, items: tuple[Any, ...]) -> bytes:
    _, writer = _tag_codec(api_key, version, tag)
    buf = io.BytesIO()
    writer(buf, items)
    return buf.getvalue()
