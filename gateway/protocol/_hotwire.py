# cython: language_level=3, annotation_typing=False, cdivision=True
# cython: boundscheck=False, wraparound=False
"""Reading the wire on the hot path, in one source for both builds: a Produce's acks,
the walk to a response's top-level tagged section, which requests a PlainTable may take
(not a SaslHandshake), and the lengths and tagged sections they read.

Cython compiles this file as it stands (``_hotwire.pxd`` beside it gives the C types)
for the compiled scanner (``_scan.py``, compiled too), which calls these functions
without a Python call; the Python side runs the same file as plain Python (``_hot``):
the readers' loops (``_rules``), the scanner's plain build, and a build without a C
compiler. tests/unit/gateway/protocol/test_scan.py runs both builds on the same bytes,
and test_one_source.py fails if one of these rules is written a second time.

Only what reads the same in Python and in Cython is written here: indexing a ``bytes``
gives an int in both, a program's integers are a tuple here and a C array there. So
the functions take the whole read and a position, never a slice (a slice would be a
copy), and say "not here" or "impossible" by a value, not an exception, where the
compiled scanner asks: an exception is a cost it cannot pay on every frame.

Why each rule holds: docs/protocol.md#wire-rules.
"""

from __future__ import annotations

from typing import Any

from ._apis import SASL_HANDSHAKE

# Where a read or skip ends when the bytes end first (-1), or when what they say cannot
# be (-2: a length below -1, a count that cannot fit in the bytes left).
NOT_HERE = -1
IMPOSSIBLE = -2
# Walk steps' kinds (``_walk.tail_program``, whose kinds these are).
_W_SKIP = 0
_W_BLOB = 1
_W_STRUCT = 3
_W_ARRAY_OF_ENTITIES = 4
_W_ARRAY_OF_FIXED = 5


# -- the wire's integers and lengths, within buf[:end] ---------------------------------


def read_int32(buf: bytes, pos: int) -> int:
    value = buf[pos] << 24 | buf[pos + 1] << 16 | buf[pos + 2] << 8 | buf[pos + 3]
    return value - ((value >> 31) << 32)  # signed


def read_int16(buf: bytes, pos: int) -> int:
    value = buf[pos] << 8 | buf[pos + 1]
    return value - ((value >> 15) << 16)  # signed


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it); position NOT_HERE when the bytes end first, or
    IMPOSSIBLE past 5 bytes (more than an int32 holds)."""
    result = 0
    shift = 0
    while pos < end:
        byte = buf[pos]
        result |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 35:
            return 0, IMPOSSIBLE
    return 0, NOT_HERE


def _length(buf: bytes, pos: int, end: int, flexible: bool, width: int) -> tuple[int, int]:
    """A length or count and the position after it: compact (uvarint of length + 1), or
    classic int16/int32."""
    if flexible:
        value, pos = _uvarint(buf, pos, end)
        return value - 1, pos
    if pos + width > end:
        return 0, NOT_HERE
    return (read_int16(buf, pos) if width == 2 else read_int32(buf, pos)), pos + width


def _skip_blob(buf: bytes, pos: int, end: int, flexible: bool, width: int) -> int:
    """Past a string, bytes or records (nullable: length -1)."""
    length, pos = _length(buf, pos, end, flexible, width)
    if pos < 0:
        return pos
    if length < -1:
        return IMPOSSIBLE
    if length > end - pos:
        return NOT_HERE
    return pos + length if length > 0 else pos


def skip_tags(buf: bytes, pos: int, end: int) -> int:
    """Past a tagged-field section (count, then tag, size and bytes each)."""
    count, pos = _uvarint(buf, pos, end)
    if pos < 0:
        return pos
    if count > end - pos:  # each field takes a byte at least
        return NOT_HERE
    for _i in range(count):
        _tag, pos = _uvarint(buf, pos, end)
        if pos < 0:
            return pos
        size, pos = _uvarint(buf, pos, end)
        if pos < 0:
            return pos
        if size > end - pos:
            return NOT_HERE
        pos += size
    return pos


# -- Produce acks -------------------------------------------------------------------------


def produce_acks_at(buf: bytes, pos: int, end: int, version: int) -> int:
    """Where the acks of the Produce request whose api key is at ``buf[pos]`` lie, read
    within ``buf[:end]``; NOT_HERE when the bytes end first, IMPOSSIBLE when a length
    before it cannot be. A Produce with acks=0 gets no answer from Kafka, so the
    in-flight table must not wait for one."""
    # After key, version and correlation id: client_id, a nullable int16 string in every
    # header version; from v9 (header v2) tagged fields; from v3 a transactional_id
    # (compact from v9). v0-v2 (Kafka 3.9 takes them) have acks right after the header.
    pos = _skip_blob(buf, pos + 8, end, False, 2)
    if pos >= 0 and version >= 9:
        pos = skip_tags(buf, pos, end)
    if pos >= 0 and version >= 3:
        pos = _skip_blob(buf, pos, end, version >= 9, 2)
    if pos >= 0 and pos + 2 > end:
        return NOT_HERE
    return pos


# -- which requests a PlainTable may take ------------------------------------------------


def scanner_takes_key(key: int) -> bool:
    """Whether the scanner may take requests of api key ``key`` (a PlainTable leaves the
    others to the readers): any but a SaslHandshake, whose mechanism is read (a login
    starts) and after which, from v0, raw SASL tokens may follow (``_rules.TOKENS``)."""
    return key != SASL_HANDSHAKE


# -- the walk to a response's top-level tagged section ------------------------------------


def walk_tail(program: Any, at: int, buf: bytes, pos: int, end: int) -> int:
    """Where the program at ``program[at]`` (``_walk.tail_program``'s flat integers)
    ends over ``buf`` from ``pos``; -1 when the bytes do not walk within ``buf[:end]``.
    A count that cannot fit in what is left (each item takes a byte at least) is
    refused at once, so a claimed count costs nothing. ``_walk.tags_offset`` walks the
    same schema resumably (streamed answers); the tests hold the two to one end."""
    flags = program[at]
    flexible = flags & 1
    step = at + 2
    stop = step + program[at + 1]
    while step < stop:
        kind = program[step]
        arg = program[step + 1]
        step += 2
        if kind == _W_SKIP:
            pos += arg  # checked by the next read, or at the end
            continue
        if kind == _W_BLOB:
            pos = _skip_blob(buf, pos, end, flexible, arg)
            if pos < 0:
                return -1
            continue
        element = step
        if kind in (_W_STRUCT, _W_ARRAY_OF_ENTITIES):
            step = element + 2 + program[element + 1]
        if kind == _W_STRUCT:
            if arg:  # nullable: a presence byte, int8 -1 for null (KIP-893)
                if pos >= end:
                    return -1
                pos += 1
                if buf[pos - 1] == 0xFF:
                    continue
            pos = walk_tail(program, element, buf, pos, end)
            if pos < 0:
                return -1
            continue
        count, pos = _length(buf, pos, end, flexible, 4)
        if pos < 0 or count < -1 or count > end - pos:
            return -1
        if kind == _W_ARRAY_OF_FIXED:
            if count > 0:
                pos += count * arg
            continue
        for _i in range(count):
            if kind == _W_ARRAY_OF_ENTITIES:
                pos = walk_tail(program, element, buf, pos, end)
            else:  # an array of strings or bytes
                pos = _skip_blob(buf, pos, end, flexible, arg)
            if pos < 0:
                return -1
    if flags & 2 and flexible:
        if pos >= end:
            return -1
        pos = skip_tags(buf, pos, end)
    if pos > end or pos < 0:
        return -1
    return pos


def tail_empty(program: Any, buf: bytes, pos: int, end: int) -> bool:
    """Whether the response from ``pos`` (after its correlation id) to ``end`` is a
    response header v1 and a body whose top-level tagged section, its last byte, is
    empty (then the gateway rewrites nothing in it)."""
    pos = skip_tags(buf, pos, end)
    if pos < 0:
        return False
    pos = walk_tail(program, 0, buf, pos, end)
    return pos == end - 1 and buf[pos] == 0
