"""Locating, splicing and stripping the top-level tagged section of response bodies."""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.api_versions.v3.response import (
    ApiVersion,
    ApiVersionsResponse,
    SupportedFeatureKey,
)
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32Timedelta, i64

from gateway.protocol import Malformed
from gateway.protocol._apis import has_schema
from gateway.protocol._tagged import (
    read_top_level_tags,
    splice_tagged_fields,
    strip_unknown_tags,
    top_level_tags_offset,
)
from tests.unit._kio_samples import sample


def encode(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def decode(cls: type, data: bytes) -> Any:
    entity, size = entity_reader(cls)(data, 0)
    assert size == len(data)
    return entity


def flexible_responses() -> list[tuple[int, int]]:
    out = []
    for key in sorted(api_key_map):  # every API the codec (kio) has
        for version in sorted(schema_name_map[api_key_map[key]]):
            if (
                has_schema(key, version, EntityType.response)
                and load_response_schema(key, version).__flexible__
            ):
                out.append((key, version))
    return out


@pytest.mark.parametrize(("key", "version"), flexible_responses())
def test_offset_is_exact_for_every_flexible_response(key: int, version: int) -> None:
    cls = load_response_schema(key, version)
    full = sample(cls, fill_tags=True)  # one item per list, nested tags written too
    blank = sample(cls)  # the same values with every tagged field at its default
    top_tags = {
        f.name: getattr(blank, f.name) for f in dataclasses.fields(cls) if "tag" in f.metadata
    }
    fixed = encode(dataclasses.replace(full, **top_tags))
    assert fixed.endswith(b"\x00")  # empty top-level tagged section
    body = encode(full)
    assert top_level_tags_offset(key, version, body) == len(fixed) - 1
    # Splicing a foreign tag and stripping it again gives back what kio wrote.
    spliced = splice_tagged_fields(key, version, body, {10000: b"\x03gw"})
    assert read_top_level_tags(key, version, spliced)[10000] == b"\x03gw"
    assert strip_unknown_tags(key, version, spliced) == body
    assert decode(cls, strip_unknown_tags(key, version, spliced)) == full


def api_versions_body(**extra: Any) -> bytes:
    return encode(
        ApiVersionsResponse(
            error_code=ErrorCode.none,
            api_keys=(ApiVersion(api_key=i16(18), min_version=i16(0), max_version=i16(4)),),
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
            **extra,
        )
    )


def test_splice_bytes_exactly() -> None:
    body = api_versions_body()
    spliced = splice_tagged_fields(18, 3, body, {10001: b"\x02b", 10000: b"\x02a"})
    expected = (
        struct.pack(">h", 0)  # error code
        + b"\x02"  # compact array of one
        + struct.pack(">hhh", 18, 0, 4)
        + b"\x00"  # ApiVersion's own (empty) tagged section
        + struct.pack(">i", 0)  # throttle time
        + b"\x02"  # two tagged fields, ascending
        + b"\x90\x4e\x02\x02a"  # tag 10000 (varint 0x90 0x4e), size 2, compact "a"
        + b"\x91\x4e\x02\x02b"  # tag 10001
    )
    assert spliced == expected


def test_splice_keeps_kio_tags_and_orders_all_tags() -> None:
    body = api_versions_body(
        supported_features=(
            SupportedFeatureKey(name="group.version", min_version=i16(0), max_version=i16(1)),
        ),
        finalized_features_epoch=i64(7),
    )
    spliced = splice_tagged_fields(18, 3, body, {10000: b"\x01"})
    tags = read_top_level_tags(18, 3, spliced)
    assert list(tags) == [0, 1, 10000]
    stripped = strip_unknown_tags(18, 3, spliced)
    message = decode(ApiVersionsResponse, stripped)
    assert message.finalized_features_epoch == 7
    assert message.supported_features[0].name == "group.version"


def test_splice_replaces_a_tag_already_there() -> None:
    body = api_versions_body()
    once = splice_tagged_fields(18, 3, body, {10000: b"\x02a"})
    twice = splice_tagged_fields(18, 3, once, {10000: b"\x02z"})
    assert read_top_level_tags(18, 3, twice) == {10000: b"\x02z"}


def test_kio_itself_refuses_unknown_tags() -> None:
    # The reason for strip_unknown_tags: if kio ever starts skipping them, this fails
    # and the stripping can go.
    spliced = splice_tagged_fields(18, 3, api_versions_body(), {10000: b"\x01"})
    with pytest.raises(KeyError):
        decode(ApiVersionsResponse, spliced)


def test_truncated_body_is_malformed() -> None:
    body = api_versions_body()
    for cut in range(len(body)):
        with pytest.raises(Malformed):
            top_level_tags_offset(18, 3, body[:cut])


def test_trailing_bytes_are_malformed() -> None:
    with pytest.raises(Malformed):
        top_level_tags_offset(18, 3, api_versions_body() + b"\x00")


def test_non_flexible_version_has_no_tags() -> None:
    with pytest.raises(ValueError):
        splice_tagged_fields(18, 2, b"", {10000: b"\x01"})
    assert strip_unknown_tags(18, 2, b"\x00\x00") == b"\x00\x00"


def test_strip_returns_body_unchanged_without_unknown_tags() -> None:
    body = api_versions_body(finalized_features_epoch=i64(3))
    assert strip_unknown_tags(18, 3, body) == body
