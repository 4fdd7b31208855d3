"""Build a sample kio request of any schema, with one item in every list.

Used by the UNSUPPORTED_VERSION tests: a request whose every list holds one item
exercises the mirroring of topics/partitions/groups into the error response.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial.readers import tz_aware_from_i64
from kio.static.primitive import i32Timedelta, i64, i64Timedelta

_INTS = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}


def _unwrap(hint: Any) -> Any:
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def _value(kafka_type: str | None, element: Any, name: str, fill_tags: bool) -> Any:
    if dataclasses.is_dataclass(element):
        return sample(element, fill_tags=fill_tags)
    if kafka_type in _INTS:
        return element(1)
    if kafka_type == "bool":
        return False
    if kafka_type == "string":
        return element(f"{name}-1")
    if kafka_type in ("bytes", "records"):
        return element(b"")
    if kafka_type == "uuid":
        return uuid.UUID(int=7)
    if kafka_type == "float64":
        return element(1.0)
    if kafka_type == "timedelta_i32":
        return i32Timedelta.parse(datetime.timedelta(milliseconds=100))
    if kafka_type == "timedelta_i64":
        return i64Timedelta.parse(datetime.timedelta(milliseconds=100))
    if kafka_type == "datetime_i64":
        return tz_aware_from_i64(i64(0))
    if kafka_type == "error_code":
        return ErrorCode.none
    raise TypeError(kafka_type)


def sample(cls: type, *, fill_tags: bool = False, **overrides: Any) -> Any:
    """An instance of kio entity ``cls`` with every list holding exactly one item.

    Tagged fields keep their defaults (so they are not written) unless ``fill_tags``.
    """
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in overrides:
            values[f.name] = overrides[f.name]
            continue
        if "tag" in f.metadata and not fill_tags:
            # Keep tagged fields at their defaults, so kio leaves them out.
            if f.default is dataclasses.MISSING:
                values[f.name] = get_tagged_field_default(f)
            continue
        hint = _unwrap(hints[f.name])
        kafka_type = f.metadata.get("kafka_type")
        if typing.get_origin(hint) is tuple:
            element = _unwrap(typing.get_args(hint)[0])
            values[f.name] = (_value(kafka_type, element, f.name, fill_tags),)
        else:
            values[f.name] = _value(kafka_type, hint, f.name, fill_tags)
    return cls(**values)
