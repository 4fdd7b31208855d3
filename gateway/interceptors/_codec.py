"""Whole-message decode/encode through ``kio`` — the only place interceptors touch bytes."""

from __future__ import annotations

import io
import types
import typing
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer


@cache
def _response_codec(api_key: int, version: int) -> tuple[Any, Any]:
    schema = load_response_schema(api_key, version)
    return entity_reader(schema), entity_writer(schema)


@cache
def _request_codec(api_key: int, version: int) -> tuple[Any, Any]:
    schema = load_request_schema(api_key, version)
    return entity_reader(schema), entity_writer(schema)


def decode_response(api_key: int, version: int, body: bytes | memoryview) -> Any:
    reader, _ = _response_codec(api_key, version)
    entity, _size = reader(body, 0)
    return entity


def encode_response(entity: Any) -> bytes:
    _, writer = _response_codec(entity.__api_key__, entity.__version__)
    buf = io.BytesIO()
    writer(buf, entity)
    return buf.getvalue()


def decode_request(api_key: int, version: int, body: bytes | memoryview) -> Any:
    reader, _ = _request_codec(api_key, version)
    entity, _size = reader(body, 0)
    return entity


def encode_request(entity: Any) -> bytes:
    _, writer = _request_codec(entity.__api_key__, entity.__version__)
    buf = io.BytesIO()
    writer(buf, entity)
    return buf.getvalue()


def unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """(X, True) for a kio field hint ``X | None``, else (hint, False)."""
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False
