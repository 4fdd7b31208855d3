"""Kafka wire primitives the core needs without decoding whole messages.

Whole messages are decoded with ``kio``; these helpers only cover what the
framing layer must read itself (header fields, tagged-field sections) so that
frames no interceptor asked for are never fully parsed.
"""

from __future__ import annotations

import struct

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")


class Malformed(ValueError):
    """The bytes do not follow the Kafka wire format (truncated or bad lengths)."""


class Incomplete(Exception):
    """More bytes are needed before this field can be read."""


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int, end: int = -1) -> tuple[int, int]:
    """Read an unsigned varint at ``pos`` (within ``buf[:end]`` when ``end`` is given);
    return (value, next position)."""
    value = 0
    shift = 0
    if end < 0:
        end = len(buf)
    while True:
        if pos >= end:
            raise Incomplete
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise Malformed("unsigned varint longer than 5 bytes")


def write_uvarint(value: int, width: int = 1) -> bytes:
    """``value`` as an unsigned varint of at least ``width`` bytes (at most 5).

    A ``width`` beyond the minimal encoding adds continuation bytes that carry zero
    bits. Kafka's varint readers (Java's ByteUtils.readUnsignedVarint, librdkafka,
    franz-go) take 7 bits a byte until a byte without the high bit, so they read the
    same value; the gateway uses this only to give a rewritten section the exact length
    of the bytes it replaces.
    """
    out = bytearray()
    while value > 0x7F or len(out) < width - 1:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    if len(out) > 5:
        raise ValueError(f"an unsigned varint has at most 5 bytes, not {len(out)}")
    return bytes(out)


def read_tagged_fields(
    buf: bytes | bytearray | memoryview, pos: int
) -> tuple[dict[int, bytes], int]:
    """Read a tagged-field section into {tag: raw value bytes}."""
    count, pos = read_uvarint(buf, pos)
    fields: dict[int, bytes] = {}
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if pos + size > len(buf):
            raise Incomplete
        fields[tag] = bytes(buf[pos : pos + size])
        pos += size
    return fields, pos


def write_tagged_fields(fields: dict[int, bytes], count_width: int = 1) -> bytes:
    """Encode {tag: raw value} as a tagged-field section, tags ascending as the spec asks;
    the field count takes at least ``count_width`` bytes (see ``write_uvarint``)."""
    out = bytearray(write_uvarint(len(fields), count_width))
    for tag in sorted(fields):
        value = fields[tag]
        out += write_uvarint(tag)
        out += write_uvarint(len(value))
        out += value
    return bytes(out)


def skip_classic_string(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """Skip an int16-length nullable string (-1 = null)."""
    if pos + 2 > len(buf):
        raise Incomplete
    (length,) = INT16.unpack_from(buf, pos)
    pos += 2
    if length < -1:
        raise Malformed(f"string length {length}")
    if length > 0:
        pos += length
        if pos > len(buf):
            raise Incomplete
    return pos


def read_classic_string(buf: bytes | bytearray | memoryview, pos: int) -> tuple[str | None, int]:
    end = skip_classic_string(buf, pos)
    if end - pos == 2 and INT16.unpack_from(buf, pos)[0] == -1:
        return None, end
    return bytes(buf[pos + 2 : end]).decode("utf-8", "replace"), end


def skip_compact_string(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """Skip a uvarint(length+1)-prefixed compact nullable string (0 = null)."""
    length_plus_one, pos = read_uvarint(buf, pos)
    if length_plus_one > 1:
        pos += length_plus_one - 1
        if pos > len(buf):
            raise Incomplete
    return pos


def read_compact_string(buf: bytes | bytearray | memoryview, pos: int) -> tuple[str | None, int]:
    length_plus_one, start = read_uvarint(buf, pos)
    if length_plus_one == 0:
        return None, start
    end = start + length_plus_one - 1
    if end > len(buf):
        raise Incomplete
    return bytes(buf[start:end]).decode("utf-8", "replace"), end
