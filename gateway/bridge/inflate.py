"""A bound on what the bridge inflates: the compressed payloads of a message set or of
record batches, measured before kafka-python decompresses them whole. Sans-I/O.

Converting records means decompressing them (``records``), and kafka-python inflates a
payload in one piece: a 50 KB gzip message set of zeros took 200 MB to bridge. So each
payload's inflated size is measured first, without holding the output (gzip, LZ4 and
zstd in 1 MiB steps; snappy from the lengths its blocks declare, which is also what
python-snappy allocates), and records inflating past ``MAX_INFLATED_BYTES`` in all are
refused: the request's connection is closed as for any records the bridge cannot read,
and so is that of a Fetch answer it cannot bring down. Records too small to get past the
bound at their codecs' highest ratios are not measured (most of them).

A payload that does not decompress is left to kafka-python, which says why.
"""

from __future__ import annotations

import io
import struct
import zlib

from kafka import codec

MAX_INFLATED_BYTES = 64 << 20
_STEP = 1 << 20
GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
# The most each codec can inflate one byte to (deflate: 1032; LZ4: 255); zstd: no
# practical bound, always measured.
_MAX_RATIO = {GZIP: 1032, SNAPPY: 0, LZ4: 255}
_XERIAL = b"\x82SNAPPY\x00"
_INT32 = struct.Struct(">i")
_ENTRY = struct.Struct(">qi")  # offset, size: both formats start so
_MAGIC_AT = 16  # from an entry's start: after offset, size and CRC (or leader epoch)


class TooLarge(ValueError):
    """Records that would inflate past the bound."""


def check(data: bytes | memoryview, limit: int = MAX_INFLATED_BYTES) -> None:
    """Raise TooLarge when the compressed payloads in ``data`` (a message set or record
    batches) inflate past ``limit`` bytes in all."""
    payloads = _payloads(memoryview(data))
    bounded = all(_MAX_RATIO.get(kind) for kind, _ in payloads)
    if bounded and sum(len(p) * _MAX_RATIO[kind] for kind, p in payloads) <= limit:
        return  # cannot get past it, whatever they hold
    total = 0
    for kind, payload in payloads:
        total += _inflated(kind, payload, limit - total)
        if total > limit:
            raise TooLarge(f"records inflate past {limit} bytes")


def _payloads(view: memoryview) -> list[tuple[int, memoryview]]:
    """(codec, compressed bytes) of each compressed wrapper or batch; a partial last
    entry (a fetch may end with one) is left out."""
    out: list[tuple[int, memoryview]] = []
    pos = 0
    while pos + _ENTRY.size <= len(view):
        size = _ENTRY.unpack_from(view, pos)[1]
        end = pos + _ENTRY.size + size
        if size < 0 or end > len(view) or pos + _MAGIC_AT + 2 > end:
            break
        magic = view[pos + _MAGIC_AT]
        if magic == 2:
            if pos + 61 <= end:
                attributes = struct.unpack_from(">h", view, pos + 21)[0]
                out.append((attributes & 0x07, view[pos + 61 : end]))
        elif magic in (0, 1):
            kind = view[pos + _MAGIC_AT + 1] & 0x07
            at = pos + _MAGIC_AT + 2 + (8 if magic == 1 else 0)
            value = _skip_bytes(view, at, end)  # the key
            if kind and value is not None:
                length = _INT32.unpack_from(view, value)[0] if value + 4 <= end else -1
                if 0 <= length <= end - value - 4:
                    out.append((kind, view[value + 4 : value + 4 + length]))
        pos = end
    return [(kind, payload) for kind, payload in out if kind]


def _skip_bytes(view: memoryview, at: int, end: int) -> int | None:
    if at + 4 > end:
        return None
    length = _INT32.unpack_from(view, at)[0]
    return at + 4 + max(length, 0)


def _inflated(kind: int, payload: memoryview, budget: int) -> int:
    """How large ``payload`` inflates, counted up to just past ``budget``."""
    try:
        if kind == GZIP:
            return _gzip(bytes(payload), budget)
        if kind == SNAPPY:
            return _snappy(bytes(payload))
        if kind == LZ4:
            return _lz4(bytes(payload), budget)
        if kind == ZSTD and codec.zstd is not None:
            return _zstd(bytes(payload), budget)
    except Exception:  # corrupt: kafka-python's decode says why
        return 0
    return 0


def _gzip(data: bytes, budget: int) -> int:
    total = 0
    while data:
        inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header
        while data and not inflater.eof:
            total += len(inflater.decompress(data, _STEP))
            if total > budget:
                return total
            data = inflater.unconsumed_tail
        data = inflater.unused_data  # a further gzip member
    return total


def _varint(data: bytes, pos: int) -> int:
    value = shift = 0
    for byte in data[pos : pos + 5]:
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    raise ValueError("bad varint")


def _snappy(data: bytes) -> int:
    if not data.startswith(_XERIAL):
        return _varint(data, 0)
    total, pos = 0, 16  # xerial: its header, then length-prefixed raw blocks
    while pos + 4 <= len(data):
        size = _INT32.unpack_from(data, pos)[0]
        total += _varint(data, pos + 4)
        pos += 4 + max(size, 0)
    return total


def _lz4(data: bytes, budget: int) -> int:
    import lz4.frame

    try:
        return _lz4_frame(lz4.frame, data, budget)
    except RuntimeError:  # Kafka 0.8-0.9's framing: a wrong header checksum
        flags = data[4]
        header = 7 + (8 if flags >> 3 & 1 else 0)
        assert codec.xxhash is not None
        checksum = codec.xxhash.xxh32(data[4 : header - 1]).digest()[-2:-1]
        return _lz4_frame(lz4.frame, data[: header - 1] + checksum + data[header:], budget)


def _lz4_frame(frame: object, data: bytes, budget: int) -> int:
    inflater = frame.LZ4FrameDecompressor()  # type: ignore[attr-defined]
    total = len(inflater.decompress(data, max_length=_STEP))
    while not inflater.eof and not inflater.needs_input and total <= budget:
        total += len(inflater.decompress(b"", max_length=_STEP))
    return total


def _zstd(data: bytes, budget: int) -> int:
    total = 0
    with codec.zstd.ZstdDecompressor().stream_reader(
        io.BytesIO(data), read_across_frames=True
    ) as reader:
        while total <= budget:
            chunk = reader.read(_STEP)
            if not chunk:
                break
            total += len(chunk)
    return total
