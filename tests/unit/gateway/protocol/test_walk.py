"""The two walks along a schema agree: the one over a body held whole (``tags_offset``,
``field_offset``, ``measure``: plain loops over offsets) and the streaming one
(generators driven by ``_Finder``, which ``TailFinder`` and ``HeadFinder`` use).

The loops were written for speed (a gathered Produce v10+ response is walked on every
produce); the generators are the reference. They must reach the same offset on every
body, and refuse the same bodies the same way: ``Incomplete`` where the body ends
first, ``Malformed`` where a length cannot be.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from gateway.protocol import Incomplete, Malformed, known_api_keys
from gateway.protocol._apis import has_schema
from gateway.protocol._finders import _Finder
from gateway.protocol._walk import (
    Walk,
    _entity,
    field_offset,
    fields,
    layout,
    measure,
    tags_offset,
)
from tests.unit._kio_samples import sample
from tests.unit.gateway.interceptors.test_tagged import encode, flexible_responses


def streamed(walk: Walk, body: bytes) -> int | type[Exception]:
    """Where the generator walk ends on ``body`` fed whole, or the exception it ends with
    (``Incomplete`` when the body ends first)."""
    try:
        finder = _Finder(walk)
        reached = finder.feed(memoryview(body), 0, len(body))
    except StopIteration:  # nothing to walk (a request with no fields): ends at once
        return 0
    except (Incomplete, Malformed) as exc:
        return type(exc)
    return reached if finder.found else Incomplete


def whole(walk: Callable[[], int]) -> int | type[Exception]:
    try:
        return walk()
    except (Incomplete, Malformed) as exc:
        return type(exc)


def all_schemas(kind: EntityType) -> list[tuple[int, int]]:
    return [
        (key, version)
        for key in known_api_keys()
        for version in sorted(schema_name_map[api_key_map[key]])
        if has_schema(key, version, kind)
    ]


def cuts(body: bytes) -> list[bytes]:
    """``body`` cut at every length, and with a byte flipped at every position."""
    out = [body[:n] for n in range(len(body))]
    out += [body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1 :] for i in range(len(body))]
    return out


@pytest.mark.parametrize(("key", "version"), flexible_responses())
def test_tags_offset_agrees_with_the_streaming_walk(key: int, version: int) -> None:
    cls = load_response_schema(key, version)
    body = encode(sample(cls, fill_tags=True))
    assert tags_offset(key, version, body) == streamed(fields(cls), body)
    for variant in cuts(body):
        assert whole(lambda v=variant: tags_offset(key, version, v)) == streamed(
            fields(cls), variant
        ), variant.hex()


@pytest.mark.parametrize(("key", "version"), all_schemas(EntityType.request))
def test_measure_agrees_with_the_streaming_walk(key: int, version: int) -> None:
    cls = load_request_schema(key, version)
    body = encode(sample(cls, fill_tags=True))
    assert measure(cls, body) == len(body) == streamed(_entity(cls), body)
    for variant in cuts(body):
        assert whole(lambda v=variant: measure(cls, v)) == streamed(_entity(cls), variant)


def compound_fields(cls: type) -> list[str]:
    """The top-level array and struct fields of ``cls``, which ``field_offset`` finds."""
    return [f.name for f in layout(cls)[0] if f.array or f.entity is not None]


@pytest.mark.parametrize(
    ("key", "version"),
    [
        case
        for case in all_schemas(EntityType.response)
        if compound_fields(load_response_schema(*case))
    ],
)
def test_field_offset_agrees_with_the_streaming_walk(key: int, version: int) -> None:
    cls = load_response_schema(key, version)
    compound = compound_fields(cls)
    body = encode(sample(cls, fill_tags=True))
    for name in compound:
        assert field_offset(cls, name, body) == streamed(fields(cls, stop_before=name), body)


# Responses of the APIs the gateway walks on every request (Produce v10+, Fetch v16+)
# and Metadata: random bytes after a valid start, so lengths and counts take every value.
WALKED = [(0, 10), (0, 11), (1, 16), (1, 17), (3, 12)]


@settings(max_examples=300, deadline=None)
@given(
    case=st.sampled_from(WALKED),
    keep=st.integers(min_value=0, max_value=64),
    noise=st.binary(max_size=64),
)
def test_random_bodies_end_the_same_way(case: tuple[int, int], keep: int, noise: bytes) -> None:
    key, version = case
    cls = load_response_schema(key, version)
    body = encode(sample(cls, fill_tags=True))[:keep] + noise
    assert whole(lambda: tags_offset(key, version, body)) == streamed(fields(cls), body)


def test_a_huge_count_of_fixed_size_items_is_refused_at_once() -> None:
    """A count claims 2**31 - 1 items of a struct of fixed-width fields (nothing to read
    in them, so nothing to fail on): the walk stops once it is past the end of the body
    rather than stepping through every claimed item (pytest-timeout would stop it)."""
    cls = load_response_schema(0, 3)  # Produce v3: classic arrays of fixed-width partitions
    body = struct.pack(">ih5si", 1, 5, b"topic", 2**31 - 1) + bytes(64)
    with pytest.raises(Incomplete):
        measure(cls, body)
    assert streamed(_entity(cls), body) is Incomplete
