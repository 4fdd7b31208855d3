"""The schema walk ends the same way whether a body is held whole or streams past in
chunks.

One loop (``_walk.walk``) serves both: ``tags_offset``, ``field_offset`` and ``measure``
run it once over a whole body, the finders (``_Finder``, which ``TailFinder`` and
``HeadFinder`` are) once per chunk, keeping between chunks the bytes of a read split
across them or how far a skip runs past one. These tests hold the two uses to each other
on every schema, every truncation and byte flip of a sample, and random bodies: the same
offset, or the same refusal (``Incomplete`` where the body ends first, ``Malformed``
where a length cannot be), however the bytes are cut.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from gateway.protocol import Incomplete, Malformed
from gateway.protocol._apis import has_schema
from gateway.protocol._finders import _JOIN, HeadFinder, TailFinder, _Finder, _last_heads
from gateway.protocol._walk import (
    Program,
    _program,
    field_offset,
    layout,
    measure,
    response_schema,
    tags_offset,
    tail_program,
)
from tests.unit._kio_samples import sample
from tests.unit.gateway.protocol.test_tagged import encode, flexible_responses

Outcome = int | type[Exception]


def whole(walk: Callable[[], int]) -> Outcome:
    try:
        return walk()
    except (Incomplete, Malformed) as exc:
        return type(exc)


def chunked(program: Program, body: bytes, bounds: Iterable[int]) -> Outcome:
    """Where the walk of ``program`` ends on ``body`` fed to a finder in chunks ending at
    ``bounds`` (then at the body's end), or the exception it ends with. Each chunk is fed
    with bytes after its end that the walk must not read."""
    finder = _Finder(program)
    pos = 0
    try:
        for bound in (*bounds, len(body)):
            mv = memoryview(body[:bound] + b"\xff" * 8)
            reached = finder.feed(mv, pos, bound)
            if finder.found:
                return reached
            assert reached == bound, "a finder consumes a chunk whole until the walk ends"
            assert len(finder._kept) < _JOIN
            pos = bound
    except (Incomplete, Malformed) as exc:
        return type(exc)
    return Incomplete


def every_byte(body: bytes) -> range:
    return range(1, len(body))


def all_schemas(kind: EntityType) -> list[tuple[int, int]]:
    return [
        (key, version)
        for key in sorted(api_key_map)  # every API the codec (kio) has
        for version in sorted(schema_name_map[api_key_map[key]])
        if has_schema(key, version, kind)
    ]


def cuts(body: bytes) -> list[bytes]:
    """``body`` cut at every length, and with a byte flipped at every position."""
    return [body[:n] for n in range(len(body))] + flips(body)


def flips(body: bytes) -> list[bytes]:
    return [body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1 :] for i in range(len(body))]


def same_either_way(program: Program, walk_whole: Callable[[bytes], int], body: bytes) -> None:
    """``program``'s walk of ``body`` ends alike whole, cut in two anywhere, and fed one
    byte at a time; so do its walks of every truncation and byte flip of ``body``."""
    expected = whole(lambda: walk_whole(body))
    assert isinstance(expected, int)
    assert chunked(program, body, ()) == expected
    for cut in every_byte(body):
        assert chunked(program, body, (cut,)) == expected, cut
    # Fed one byte at a time, the walk has ended after byte n exactly when the walk of
    # the body cut to n bytes ends: checks every truncation in one pass.
    finder = _Finder(program)
    mv = memoryview(body)
    for n in range(len(body) + 1):
        if not finder.found:
            finder.feed(mv, max(n - 1, 0), n)
        cut = body[:n]
        got = whole(lambda c=cut: walk_whole(c))  # type: ignore[misc]
        assert got == (expected if finder.found else Incomplete), n
    for variant in flips(body):
        assert chunked(program, variant, every_byte(variant)) == whole(
            lambda v=variant: walk_whole(v)  # type: ignore[misc]
        ), variant.hex()


@pytest.mark.parametrize(("key", "version"), flexible_responses())
def test_tags_offset_ends_alike_whole_and_in_chunks(key: int, version: int) -> None:
    body = encode(sample(load_response_schema(key, version), fill_tags=True))
    program = _program(response_schema(key, version))
    same_either_way(program, lambda b: tags_offset(key, version, b), body)


@pytest.mark.parametrize(("key", "version"), all_schemas(EntityType.request))
def test_measure_ends_alike_whole_and_in_chunks(key: int, version: int) -> None:
    cls = load_request_schema(key, version)
    body = encode(sample(cls, fill_tags=True))
    assert measure(cls, body) == len(body)
    same_either_way(_program(cls, None, True), lambda b: measure(cls, b), body)


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
def test_field_offset_ends_alike_whole_and_in_chunks(key: int, version: int) -> None:
    cls = load_response_schema(key, version)
    body = encode(sample(cls, fill_tags=True))
    for name in compound_fields(cls):
        offset = field_offset(cls, name, body)
        program = _program(cls, name)
        assert chunked(program, body, ()) == offset
        assert chunked(program, body, every_byte(body)) == offset
        # Through the field: where the walk starting at it ends after its one step.
        through = chunked(_program(cls, name, False, True), body, every_byte(body))
        assert isinstance(through, int) and through > offset


@pytest.mark.parametrize(("key", "version"), flexible_responses())
def test_tail_program_holds_only_the_steps_the_c_walk_runs(key: int, version: int) -> None:
    def steps(flat: tuple[int, ...], at: int) -> int:
        end = at + 2 + flat[at + 1]
        at += 2
        while at < end:
            kind = flat[at]
            assert kind in (0, 1, 3, 4, 5, 6), kind
            at += 2
            if kind in (3, 4):
                at = steps(flat, at)
        assert at == end
        return end

    flat = tail_program(key, version)
    assert steps(flat, 0) == len(flat)


# Responses of the APIs the gateway walks on every request (Produce v10+, Fetch v16+)
# and Metadata: random bytes after a valid start, so lengths and counts take every value.
WALKED = [(0, 10), (0, 11), (1, 16), (1, 17), (3, 12)]


@settings(max_examples=300, deadline=None)
@given(
    case=st.sampled_from(WALKED),
    keep=st.integers(min_value=0, max_value=64),
    noise=st.binary(max_size=64),
    bounds=st.lists(st.integers(min_value=0, max_value=128), max_size=8),
)
def test_random_bodies_end_the_same_way(
    case: tuple[int, int], keep: int, noise: bytes, bounds: list[int]
) -> None:
    key, version = case
    body = encode(sample(load_response_schema(key, version), fill_tags=True))[:keep] + noise
    program = _program(response_schema(key, version))
    expected = whole(lambda: tags_offset(key, version, body))
    assert chunked(program, body, sorted(b for b in set(bounds) if b < len(body))) == expected
    assert chunked(program, body, every_byte(body)) == expected


def test_a_huge_count_of_fixed_size_items_is_refused_at_once() -> None:
    """A count claims 2**31 - 1 items of a struct of fixed-width fields (nothing to read
    in them, so nothing to fail on): the walk stops once it is past the end of the bytes
    rather than stepping through every claimed item (pytest-timeout would stop it)."""
    cls = load_response_schema(0, 3)  # Produce v3: classic arrays of fixed-width partitions
    body = struct.pack(">ih5si", 1, 5, b"topic", 2**31 - 1) + bytes(64)
    with pytest.raises(Incomplete):
        measure(cls, body)
    assert chunked(_program(cls, None, True), body, (20, 40)) is Incomplete
    finder = _Finder(_program(cls, None, True))
    assert finder.feed(memoryview(body), 0, len(body)) == len(body)
    assert not finder.found and finder._over > 0  # it goes on in the next bytes


def test_a_skip_runs_on_through_the_chunks_that_follow() -> None:
    cls = load_response_schema(1, 17)
    response = sample(cls, fill_tags=True)
    (topic,) = response.responses
    (partition,) = topic.partitions
    partition = dataclasses.replace(partition, records=bytes(range(256)) * 1024)
    topic = dataclasses.replace(topic, partitions=(partition,))
    big = encode(dataclasses.replace(response, responses=(topic,)))
    expected = tags_offset(1, 17, big)
    program = _program(response_schema(1, 17))
    assert chunked(program, big, range(100, len(big), 1000)) == expected
    assert chunked(program, big, range(7, len(big), 4096)) == expected


def test_the_finders_walk_the_header_then_the_body() -> None:
    """``TailFinder``: response header v1's tagged section, then the body to its own;
    ``HeadFinder``: the same header, then through the field it names, inclusive."""
    body = encode(sample(load_response_schema(1, 17), fill_tags=True))
    header = b"\x01\x05\x03abc"  # one tagged field: tag 5, 3 bytes
    frame = header + body
    for cut in every_byte(frame):
        finder = TailFinder(1, 17)
        mv = memoryview(frame)
        got = finder.feed(mv, 0, cut)
        if not finder.found:
            got = finder.feed(mv, cut, len(frame))
        assert finder.found and got == len(header) + tags_offset(1, 17, body), cut
    metadata = load_response_schema(3, 12)
    body = encode(sample(metadata, fill_tags=True))
    frame = header + body
    through = chunked(_program(metadata, "brokers", False, True), body, ())
    assert isinstance(through, int) and through > field_offset(metadata, "brokers", body)
    for cut in every_byte(frame):
        _last_heads.clear()  # the walk, not the last head remembered
        head = HeadFinder(3, 12, "brokers")
        mv = memoryview(frame)
        got = head.feed(mv, 0, cut)
        if not head.found:
            got = head.feed(mv, cut, len(frame))
        assert head.found and got == len(header) + through, cut
