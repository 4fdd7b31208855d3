"""Metadata responses stream through; only their header and brokers array are held back.

The streamed rewrite (``HeadFinder`` in the ``ResponseReader``, then ``rewrite_head``)
must give byte for byte what the buffered rewrite (``rewrite_response`` on the whole
frame) gives, in every Metadata version, whatever the messages (hypothesis over kio's
types) and however the frame is cut into reads.
"""

from __future__ import annotations

import dataclasses
import itertools
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.interceptors.addresses import LAST_HEADS, head_finder, rewrite_head, rewrite_response
from gateway.protocol import (
    METADATA,
    InFlight,
    ProtocolViolation,
    ResponseHead,
    ResponseReader,
)
from tests.unit._kafka import encode, frame, nested, schema_module, top_level
from tests.unit.gateway.interceptors.test_addresses import IdentityBook, metadata, versions

VERSIONS = versions("metadata")


class Book:
    """Node N → gw-N.example:19000+N: a host of another length than the broker's."""

    generation = 0  # its answers never change

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        return f"gw-{node_id}.example", 19000 + node_id % 1000


def response_frame(version: int, body: bytes, correlation_id: int = 7) -> bytes:
    # Metadata uses response header v1 (tagged section) from v9, when it became flexible.
    header = struct.pack(">i", correlation_id) + (b"\x00" if version >= 9 else b"")
    return frame(header + body)


def buffered(version: int, whole: bytes) -> bytes:
    """Today's buffered rewrite of a whole frame, as the proxy does it."""
    header_len = 4 + (5 if version >= 9 else 4)
    body = whole[header_len:]
    new = bytes(rewrite_response(METADATA, version, body, Book()))
    return frame(whole[4:header_len] + new)


def streamed(version: int, chunks: list[bytes], correlation_id: int = 7) -> bytes:
    """What the gateway writes to the client when the frame arrives in ``chunks``."""
    inflight = InFlight()
    inflight.add(METADATA, version, correlation_id)
    reader = ResponseReader(
        inflight,
        intercept=lambda entry: True,
        tail_policy=lambda entry, size: head_finder(entry.api_key, entry.api_version),
    )
    out = bytearray()
    for chunk in chunks:
        for item in reader.feed(chunk):
            if isinstance(item, ResponseHead):
                # O(brokers): the head never holds a topic.
                assert len(item.head) < 1024
                out += rewrite_head(METADATA, version, item.head, Book())
            elif isinstance(item, bytes | memoryview):
                out += item
            else:
                raise AssertionError(f"unexpected {item!r}")
    assert not inflight, "the request is finished once its response went out"
    assert not reader.mid_frame
    return bytes(out)


def test_metadata_versions_run_from_0_to_at_least_12() -> None:
    assert VERSIONS[0] == 0 and VERSIONS[-1] >= 12


@pytest.mark.parametrize("version", VERSIONS)
def test_streamed_equals_buffered_when_cut_at_every_byte(version: int) -> None:
    whole = response_frame(version, encode(metadata(version)))
    expected = buffered(version, whole)
    assert expected != whole  # the brokers were rewritten, to another length
    assert streamed(version, [whole]) == expected
    assert streamed(version, [whole[i : i + 1] for i in range(len(whole))]) == expected
    for cut in range(1, len(whole)):
        assert streamed(version, [whole[:cut], whole[cut:]]) == expected, cut


@st.composite
def metadata_frames(draw: st.DrawFn) -> tuple[int, bytes, list[int]]:
    """Any brokers kio can encode (hosts of any length, racks, ids), in front of the
    sample topics: the brokers are what the head holds and the rewrite changes."""
    version = draw(st.sampled_from(VERSIONS))
    cls = top_level(schema_module("metadata", version, "response"))
    brokers = draw(st.lists(st.from_type(nested(cls, "brokers")), max_size=4))
    body = encode(dataclasses.replace(metadata(version), brokers=tuple(brokers)))
    whole = response_frame(version, body)
    cuts = sorted(draw(st.sets(st.integers(1, len(whole) - 1), max_size=6)))
    return version, whole, cuts


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metadata_frames())
def test_streamed_equals_buffered_for_generated_metadata(
    case: tuple[int, bytes, list[int]],
) -> None:
    version, whole, cuts = case
    bounds = [0, *cuts, len(whole)]
    chunks = [whole[a:b] for a, b in itertools.pairwise(bounds)]
    assert streamed(version, chunks) == buffered(version, whole)


def test_two_responses_in_one_read_each_get_their_own_length() -> None:
    inflight = InFlight()
    for correlation_id in (1, 2):
        inflight.add(METADATA, 1, correlation_id)
    reader = ResponseReader(
        inflight,
        intercept=lambda entry: True,
        tail_policy=lambda entry, size: head_finder(entry.api_key, entry.api_version),
    )
    body = encode(metadata(1))
    first, second = response_frame(1, body, 1), response_frame(1, body, 2)
    out = bytearray()
    for item in reader.feed(first + second):
        out += (
            rewrite_head(METADATA, 1, item.head, Book()) if isinstance(item, ResponseHead) else item  # type: ignore[operator]
        )
    assert bytes(out) == buffered(1, first) + buffered(1, second)
    assert not inflight


def _lying(version: int) -> tuple[bytes, Any]:
    """A frame whose brokers array claims more brokers than the frame holds."""
    original = metadata(version)
    body = encode(original)
    whole = response_frame(version, body)
    header_len = 4 + (5 if version >= 9 else 4)
    count_at = header_len + (4 if version >= 3 else 0)  # throttle_time_ms precedes brokers
    if version >= 9:
        lie = bytes([0x7F])  # compact count 126
        assert whole[count_at] == len(original.brokers) + 1
        return whole[:count_at] + lie + whole[count_at + 1 :], original
    assert struct.unpack_from(">i", whole, count_at)[0] == len(original.brokers)
    return whole[:count_at] + struct.pack(">i", 1000) + whole[count_at + 4 :], original


@pytest.mark.parametrize("version", [0, 1, 8, 9, 12])
def test_a_brokers_array_running_past_its_frame_closes_without_forwarding(version: int) -> None:
    whole, _ = _lying(version)
    inflight = InFlight()
    inflight.add(METADATA, version, 7)
    reader = ResponseReader(
        inflight,
        intercept=lambda entry: True,
        tail_policy=lambda entry, size: head_finder(entry.api_key, entry.api_version),
    )
    items = [item for i in range(len(whole)) for item in reader.feed(whole[i : i + 1])]
    assert len(items) == 1, items  # no byte of the frame went to the client
    (violation,) = items
    assert isinstance(violation, ProtocolViolation)
    assert violation.reason == "malformed_frame"
    assert f"Metadata v{version} response (correlation id 7)" in violation.detail


# -- the same head again: the walk and the rewrite are remembered ------------------------
class MovingBook:
    """Answers from a table that a test changes (``move``, which bumps the generation),
    and records every question."""

    def __init__(self) -> None:
        self.port = 19000
        self.generation = 0
        self.asked: list[tuple[int, str, int]] = []

    def move(self, port: int) -> None:
        self.port = port
        self.generation += 1

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        self.asked.append((node_id, host, port))
        return f"gw-{node_id}.example", self.port + node_id


def _head(version: int, whole: bytes) -> bytes:
    inflight = InFlight()
    inflight.add(METADATA, version, 7)
    reader = ResponseReader(
        inflight,
        intercept=lambda entry: True,
        tail_policy=lambda entry, size: head_finder(entry.api_key, entry.api_version),
    )
    (head,) = [item.head for item in reader.feed(whole) if isinstance(item, ResponseHead)]
    return head


@pytest.mark.parametrize("version", [1, 12])
def test_a_remembered_head_holds_while_the_books_generation_does(version: int) -> None:
    head = _head(version, response_frame(version, encode(metadata(version))))
    book = MovingBook()
    first = rewrite_head(METADATA, version, head, book)
    asked = list(book.asked)
    assert asked  # every broker was asked about
    assert rewrite_head(METADATA, version, head, book) == first
    assert book.asked == asked  # nothing could have changed: nothing asked
    # What the compiled lane reads: the head after the correlation id, both ways.
    last = LAST_HEADS[METADATA, version]
    assert (last.original, last.rewritten) == (head[8:], first[8:])
    assert (last.book, last.generation) == (book, 0)
    # A new generation with the same answers (a ClusterRouter learnt another broker):
    # the same questions again, as a fresh rewrite would ask, and the same head.
    book.generation += 1
    assert rewrite_head(METADATA, version, head, book) == first
    assert book.asked == asked * 2
    assert LAST_HEADS[METADATA, version].generation == 1
    # Another book, at the same generation number, is asked too.
    other = MovingBook()
    other.generation = 1
    assert rewrite_head(METADATA, version, head, other) == first
    assert other.asked == asked and LAST_HEADS[METADATA, version].book is other
    book.move(29000)  # e.g. a reload moved the gateway's ports
    moved = rewrite_head(METADATA, version, head, book)
    assert moved != first
    assert moved == rewrite_head(METADATA, version, head, book)
    assert struct.pack(">i", 29001) in moved  # node 1's new port
    assert LAST_HEADS[METADATA, version].rewritten == moved[8:]


def test_a_head_nothing_changes_is_remembered_as_the_same_bytes() -> None:
    """The lane then forwards the response as it came."""
    head = _head(1, response_frame(1, encode(metadata(1))))
    assert rewrite_head(METADATA, 1, head, IdentityBook()) is head
    last = LAST_HEADS[METADATA, 1]
    assert last.rewritten is last.original


@pytest.mark.parametrize("version", [1, 12])
def test_heads_that_differ_after_a_remembered_one_are_walked_again(version: int) -> None:
    cls = top_level(schema_module("metadata", version, "response"))
    base = metadata(version)
    other = dataclasses.replace(
        base, brokers=tuple(dataclasses.replace(b, host=b.host + "-x") for b in base.brokers)
    )
    a = response_frame(version, encode(base))
    b = response_frame(version, encode(other))
    assert cls is type(base)
    for whole in (a, b, a, b):
        expected = buffered(version, whole)
        assert streamed(version, [whole]) == expected
        for cut in range(1, len(whole), 7):
            assert streamed(version, [whole[:cut], whole[cut:]]) == expected, cut
