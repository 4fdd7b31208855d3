"""Broker endpoints rewritten so clients always come back through a gateway: the helpers
every address-rewriting API uses (``gateway.interceptors.apis`` says which API uses
which, as its ``Filter.mode``; ``addresses`` picks the helper by it).

In kio's types an endpoint is any record with a node id, ``host`` and ``port``, found at
the top level or in a tuple field of the response; an ``AddressBook`` says what each
becomes. Three shapes of response, three helpers:

* Whole (``rewrite_whole``): the body is decoded, or only its one endpoint array when it
  has one, and re-encoded (FindCoordinator, DescribeCluster, ShareFetch,
  ShareAcknowledge). Their endpoints are most of the response, which is bounded by the
  number of brokers (or of coordinator keys asked for).
* Head (``head_finder``, ``rewrite_head``): the endpoints (Metadata's brokers array)
  come first, before the topics and partitions that make up its bulk (4 MB at 100k
  partitions). Only the response header and the array are held back, rewritten and
  sent with the frame's new length; the rest streams through as it arrives, so a
  response costs O(brokers) in memory and CPU, not O(partitions).
* Tail (``rewrite_after_tags``, ``rewrite_tail``): the only endpoints are KIP-951's
  NodeEndpoints, a tag of the body's last part (Produce, Fetch), so only that part is
  decoded. A large Fetch streams through the gateway and only its tagged section is
  held back (see ``gateway.protocol.TailFinder``); its length prefix has gone out by
  then, so the section must keep its length. A shorter rewrite is padded with an
  unknown tag, which every flexible-version parser skips (KIP-482); one that is shorter
  by less than the smallest such tag (3 bytes) writes its tag count as a wider varint
  instead, which every Kafka varint reader reads as the same number. A longer one
  cannot fit: NodeEndpoints is dropped, and clients fall back to what they did before
  KIP-951, a Metadata request, which comes back through the gateway and is rewritten.
"""

from __future__ import annotations

import dataclasses
import io
import typing
from functools import cache
from typing import Any, NamedTuple, Protocol

from kio.static.primitive import i32

from ..protocol import (
    INT32,
    HeadFinder,
    Malformed,
    api_spec,
    decode_response_tag,
    decode_with_unknown_tags,
    encode_response,
    encode_response_tag,
    field_offset,
    read_tagged_fields,
    readonly,
    response_array_codec,
    response_body_offset,
    response_schema,
    splice_tagged_fields,
    tags_offset,
    write_tagged_fields,
    write_uvarint,
)

_NODE_ID_FIELDS = ("node_id", "broker_id")
# KIP-951: the top-level tag of NodeEndpoints in Produce (v10+) and Fetch (v16+) responses.
NODE_ENDPOINTS_TAG = 0
# Unknown tags that fill a tagged section back to its length. Kafka numbers tags from 0
# up; these are far above any it uses, and written last as tags must be ascending.
PAD_TAGS = (10_000, 10_001)


class AddressBook(Protocol):
    """Maps a broker, as the upstream advertises it, to the gateway address clients use."""

    @property
    def generation(self) -> int:
        """Changes whenever asking a question again could get another answer, or teach
        the book something (a ClusterRouter learning that a broker moved). While it
        stays the same, a rewrite remembered with it holds without asking again
        (``rewrite_head``)."""
        ...

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]: ...


def rewrite_whole(
    api_key: int, api_version: int, body: bytes | memoryview, book: AddressBook
) -> bytes | memoryview:
    """The response body with every broker endpoint replaced by its gateway address;
    ``body`` itself (not a copy) when nothing changes, so a caller can forward the frame
    it already holds."""
    field = _endpoint_array(api_key, api_version)
    if field is not None:
        return _rewrite_array(api_key, api_version, field, body, book)
    message, unknown_tags = decode_with_unknown_tags(api_key, api_version, body)
    rewritten = _rewrite(message, book)
    if rewritten is message:
        return body
    encoded = encode_response(rewritten)
    if unknown_tags:  # tags kio does not know still reach the client
        encoded = splice_tagged_fields(api_key, api_version, encoded, unknown_tags)
    return encoded


def rewrite_after_tags(
    api_key: int, api_version: int, body: bytes | memoryview, book: AddressBook
) -> bytes | memoryview:
    """As ``rewrite_whole``, for a response whose only endpoints are in its top-level
    tagged section: walking to it (records are skipped, not copied) is much cheaper than
    decoding every batch. ``rewrite_tail`` checks that what follows is exactly one
    tagged section."""
    offset = tags_offset(api_key, api_version, body)
    if offset == len(body) - 1 and body[offset] == 0:
        # An empty tagged section, the common case: brokers send NodeEndpoints only
        # when a partition's leader moved.
        return body
    tail = bytes(body[offset:])
    new_tail = rewrite_tail(api_key, api_version, tail, book).tail
    return body if new_tail is tail else bytes(body[:offset]) + new_tail


@cache
def _endpoint_array(api_key: int, api_version: int) -> str | None:
    """The one non-tagged top-level array that holds every endpoint of this response,
    if there is such an array (Metadata brokers, FindCoordinator v4+ coordinators,
    DescribeCluster brokers); else None."""
    schema = response_schema(api_key, api_version)
    holders = _endpoint_tuple_fields(schema)
    if _endpoint_node_field(schema) is not None or len(holders) != 1:
        return None
    field = next(f for f in dataclasses.fields(schema) if f.name == holders[0])
    return None if "tag" in field.metadata else field.name


def _rewrite_array(
    api_key: int, api_version: int, name: str, body: bytes | memoryview, book: AddressBook
) -> bytes | memoryview:
    """Rewrite only the array ``name``: the rest of the body (a large cluster's topics and
    partitions in a Metadata response) is neither decoded nor re-encoded, only walked up
    to the array, and it is kept byte for byte."""
    start = field_offset(response_schema(api_key, api_version), name, body)
    read, write = response_array_codec(api_key, api_version, name)
    items, size = read(readonly(body), start)
    rewritten = tuple(_rewrite(item, book) for item in items or ())
    if all(new is old for new, old in zip(rewritten, items or (), strict=True)):
        return body
    buf = io.BytesIO()
    write(buf, rewritten)
    return bytes(body[:start]) + buf.getvalue() + bytes(body[start + size :])


def head_finder(api_key: int, api_version: int) -> HeadFinder:
    """A finder for the head of a response whose endpoints all sit in one array that
    streams before the bulk of the body (Metadata, every version)."""
    return HeadFinder(api_key, api_version, _head_array(api_key, api_version))


@cache
def _head_array(api_key: int, api_version: int) -> str:
    field = _endpoint_array(api_key, api_version)
    if field is None:  # kio's Metadata schemas all have one: this guards a new version
        raise ValueError(f"api key {api_key} v{api_version} has no endpoint array")
    return field


def rewrite_head(api_key: int, api_version: int, head: bytes, book: AddressBook) -> bytes:
    """A held-back head (length prefix, response header, body up to the end of its
    endpoint array; see ``head_finder``) with its endpoints rewritten and the length
    prefix adjusted to the new frame size; ``head`` itself when nothing changes.

    The result followed by the rest of the frame is byte for byte what
    ``rewrite_whole`` makes of the whole frame.
    """
    spec = api_spec(api_key)
    assert spec is not None
    payload = memoryview(head)[4:]
    offset = response_body_offset(payload, spec.response_header_version(api_version))
    original = payload[offset:]
    key = (api_key, api_version, original.tobytes())
    known = _heads.get(key)
    if known is not None and not known.current(book):
        # Asked again, as a fresh rewrite would (a ClusterRouter learns brokers from the
        # questions): the body holds if every answer is the same, and is remembered
        # with the book's generation now.
        if all(book.advertise(n, h, p) == answer for n, h, p, answer in known.asked):
            known = _heads[key] = known._replace(book=book, generation=book.generation)
        else:
            known = None
    if known is None:
        recorder = _Recorder(book)
        rewritten = rewrite_whole(api_key, api_version, original, recorder)
        body = None if rewritten is original else bytes(rewritten)
        if len(_heads) >= _HEADS_KEPT:
            del _heads[next(iter(_heads))]  # the oldest: dicts keep insertion order
        known = _heads[key] = _RewrittenHead(body, tuple(recorder.asked), book, book.generation)
    after_id = head[8:]  # the head after its length prefix and correlation id
    if known.body is None:
        LAST_HEADS[api_key, api_version] = LastHead(after_id, after_id, book, known.generation)
        return head
    new_head = _with_body(head, offset, known.body)
    LAST_HEADS[api_key, api_version] = LastHead(after_id, new_head[8:], book, known.generation)
    return new_head


def _with_body(head: bytes, offset: int, body: bytes) -> bytes:
    """``head`` with its body (from ``offset`` after the length prefix) replaced."""
    (size,) = INT32.unpack_from(head)
    new_size = size + len(body) - (len(head) - 4 - offset)
    return b"".join((INT32.pack(new_size), head[4 : 4 + offset], body))


class _Recorder:
    """An ``AddressBook`` that passes every question on and remembers it with its answer."""

    __slots__ = ("asked", "book")

    def __init__(self, book: AddressBook) -> None:
        self.book = book
        self.asked: list[tuple[int, str, int, tuple[str, int]]] = []

    @property
    def generation(self) -> int:
        return self.book.generation

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        answer = self.book.advertise(node_id, host, port)
        self.asked.append((node_id, host, port, answer))
        return answer


class _RewrittenHead(NamedTuple):
    """A head body as rewritten once (None: unchanged), with what its rewrite asked, and
    of which book at which generation (read after the asking)."""

    body: bytes | None
    asked: tuple[tuple[int, str, int, tuple[str, int]], ...]
    book: AddressBook
    generation: int

    def current(self, book: AddressBook) -> bool:
        """Whether nothing ``book`` could answer has changed since (see
        ``AddressBook.generation``)."""
        return book is self.book and book.generation == self.generation


# Rewritten Metadata heads by their original body bytes (throttle time and brokers, a
# few hundred bytes): a cluster's brokers rarely change, and every client's Metadata
# then carries the same brokers array. Decoding and re-encoding it with kio costs
# ~70 µs a response; a hit costs a hash of those bytes. Per process and bounded: a few
# upstream clusters and versions fit, and the oldest entry goes first.
_HEADS_KEPT = 64
_heads: dict[tuple[int, int, bytes], _RewrittenHead] = {}


class LastHead(NamedTuple):
    """The last head ``rewrite_head`` made for an (api key, version): the bytes after the
    correlation id as they came (response header and body up to the end of the endpoint
    array) and as they went out (the same object when unchanged), for which book, while
    which generation of it."""

    original: bytes
    rewritten: bytes
    book: AddressBook
    generation: int


# (api key, version) → its LastHead. The compiled lane reads it (gateway/server/
# _lane.pyx): a response whose bytes after the correlation id start with ``original``
# has exactly that head (the walk that finds a head decides each step from the bytes
# read so far, see HeadFinder), so while ``book``'s generation holds the lane replaces
# it with ``rewritten`` itself, which is what this module would make of it.
LAST_HEADS: dict[tuple[int, int], LastHead] = {}


class TailRewrite(NamedTuple):
    tail: bytes
    # NodeEndpoints had to be dropped to keep the length (clients refresh Metadata).
    dropped_endpoints: bool = False


def rewrite_tail(
    api_key: int, api_version: int, tail: bytes, book: AddressBook, *, keep_length: bool = False
) -> TailRewrite:
    """The top-level tagged section ``tail`` of a Produce/Fetch response, NodeEndpoints
    rewritten; ``tail`` itself when nothing changes.

    With ``keep_length`` the result has exactly ``len(tail)`` bytes (see the module
    docstring). Raises ``Malformed`` when ``tail`` is not one tagged section.
    """
    fields, end = read_tagged_fields(tail, 0)
    if end != len(tail):
        raise Malformed(f"{len(tail) - end} bytes after the tagged fields")
    raw = fields.get(NODE_ENDPOINTS_TAG)
    if raw is None:
        return TailRewrite(tail)
    endpoints = decode_response_tag(api_key, api_version, NODE_ENDPOINTS_TAG, raw)
    rewritten = tuple(_rewrite(endpoint, book) for endpoint in endpoints)
    if all(new is old for new, old in zip(rewritten, endpoints, strict=True)):
        return TailRewrite(tail)
    fields[NODE_ENDPOINTS_TAG] = encode_response_tag(
        api_key, api_version, NODE_ENDPOINTS_TAG, rewritten
    )
    new_tail = write_tagged_fields(fields)
    if not keep_length or len(new_tail) == len(tail):
        return TailRewrite(new_tail)
    padded = _padded(fields, len(tail))
    if padded is not None:
        return TailRewrite(padded)
    del fields[NODE_ENDPOINTS_TAG]
    padded = _padded(fields, len(tail))
    if padded is None:  # cannot happen: the dropped tag took at least 3 bytes
        raise Malformed("no padding fits the tagged section")
    return TailRewrite(padded, dropped_endpoints=True)


def _padded(fields: dict[int, bytes], length: int) -> bytes | None:
    """``fields`` encoded in exactly ``length`` bytes, if that can be done."""
    base = len(write_tagged_fields({**fields, PAD_TAGS[0]: b""}))
    if base <= length:
        # Varint widths make some lengths unreachable with one pad; two pads reach the rest.
        for pads in ({}, {PAD_TAGS[1]: b""}):
            for size in range(max(length - base - 8, 0), length - base + 1):
                encoded = write_tagged_fields({**fields, **pads, PAD_TAGS[0]: bytes(size)})
                if len(encoded) == length:
                    return encoded
    # Too few bytes left for a pad (tag, size: 3 bytes at least): a wider tag count
    # fills 1 to 4 of them (see write_uvarint).
    short = length - len(write_tagged_fields(fields))
    width = len(write_uvarint(len(fields))) + short
    if short > 0 and width <= 5:
        return write_tagged_fields(fields, count_width=width)
    return None


def _rewrite(entity: Any, book: AddressBook) -> Any:
    changes: dict[str, Any] = {}
    node_field = _endpoint_node_field(type(entity))
    if node_field is not None:
        node_id = getattr(entity, node_field)
        # A coordinator lookup that failed carries node -1 and an empty host: keep it.
        if node_id >= 0 and entity.host:
            host, port = book.advertise(node_id, entity.host, entity.port)
            if (host, port) != (entity.host, entity.port):
                changes["host"] = host
                changes["port"] = i32(port)
    for name in _endpoint_tuple_fields(type(entity)):
        items = getattr(entity, name)
        new_items = tuple(_rewrite(item, book) for item in items)
        if any(new is not old for new, old in zip(new_items, items, strict=True)):
            changes[name] = new_items
    return dataclasses.replace(entity, **changes) if changes else entity


@cache
def _endpoint_node_field(cls: type) -> str | None:
    names = {f.name for f in dataclasses.fields(cls)}
    if "host" not in names or "port" not in names:
        return None
    return next((n for n in _NODE_ID_FIELDS if n in names), None)


@cache
def _endpoint_tuple_fields(cls: type) -> tuple[str, ...]:
    """Names of tuple fields whose element type is (or holds) an endpoint record."""
    hints = _field_types(cls)
    found = []
    for name, element in hints.items():
        if element is not None and _holds_endpoints(element):
            found.append(name)
    return tuple(found)


@cache
def _holds_endpoints(cls: type) -> bool:
    return _endpoint_node_field(cls) is not None or bool(_endpoint_tuple_fields(cls))


def _field_types(cls: type) -> dict[str, type | None]:
    """For each ``tuple[X, ...]`` field of a kio dataclass, the dataclass X (else None)."""

    hints = typing.get_type_hints(cls)
    out: dict[str, type | None] = {}
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name)
        args = typing.get_args(hint)
        if typing.get_origin(hint) is tuple and args and dataclasses.is_dataclass(args[0]):
            out[f.name] = args[0]  # type: ignore[assignment]
    return out
