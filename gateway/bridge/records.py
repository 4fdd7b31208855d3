"""Message sets (magic 0 and 1) and record batches (magic 2), one into the other: what the
bridge does to a Produce v0-2's records on their way up and a Fetch answer's on their way
down to a v0-3 client. Sans-I/O.

Reading both formats, decompressing and compressing, and writing batches is kafka-python's
(``kafka.record``, ``kafka.codec``): well kept, and the formats' corner cases (relative
offsets in magic 1 wrappers, LogAppendTime overriding inner timestamps, Kafka's old LZ4
framing for magic 0) are handled there. Legacy messages are written here (a struct and
a CRC-32) because kafka-python's builder can neither set a message's timestamp-type
attribute nor give a compressed wrapper its offset, and a fetch answer needs both.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka import codec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from . import inflate

NO_COMPRESSION, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
LOG_APPEND_TIME = 1
_TIMESTAMP_TYPE_BIT = 0x08
NO_TIMESTAMP = -1
# What fits in one batch: a frame is at most 2 GiB anyway.
_ANY_SIZE = 2**31 - 1

_HEAD_V0 = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_HEAD_V1 = struct.Struct(">qiIbbq")  # ... timestamp
_LENGTH = struct.Struct(">i")


class RecordsError(ValueError):
    """Records that cannot be converted (corrupt, or a codec this process lacks)."""


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: int  # how many headers it had (dropped where the format has none)


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch or wrapper as read: its records and how they were written."""

    compression: int
    timestamp_type: int
    records: list[Record]


def read_batches(data: bytes | memoryview | None) -> list[Batch]:
    """Every whole batch of ``data`` (either format; a partial last one, as a fetch may
    end with, is left out), control batches left out."""
    if not data:
        return []
    try:
        inflate.check(data)
    except inflate.TooLarge as exc:
        raise RecordsError(str(exc)) from None
    out: list[Batch] = []
    try:
        for batch in MemoryRecords(bytes(data)):
            if isinstance(batch, DefaultRecordBatch) and batch.is_control_batch:
                continue
            records = [
                Record(
                    r.offset,
                    NO_TIMESTAMP if r.timestamp is None else r.timestamp,
                    r.key,
                    r.value,
                    len(r.headers),
                )
                for r in batch
            ]
            out.append(Batch(batch.compression_type, batch.timestamp_type or 0, records))
    except Exception as exc:  # kafka-python raises asserts and its own errors alike
        raise RecordsError(f"records unreadable: {exc!r}") from exc
    return out


def to_record_batch(data: bytes | memoryview | None) -> bytes | None:
    """A Produce v0-2 message set as one record batch v2 (what Kafka 4 accepts): keys,
    values, nulls and timestamps kept (magic 0 has none: NO_TIMESTAMP, as Kafka's own
    up-conversion writes), compressed with the codec of the first wrapper."""
    if data is None:
        return None
    batches = read_batches(data)
    if not batches:
        return b""
    compression = next((b.compression for b in batches if b.compression), NO_COMPRESSION)
    try:
        builder = DefaultRecordBatchBuilder(2, compression, False, -1, -1, -1, _ANY_SIZE)
        delta = 0
        for batch in batches:
            for record in batch.records:
                builder.append(delta, record.timestamp, record.key, record.value, [])
                delta += 1
        return bytes(builder.build())
    except Exception as exc:  # a codec this process lacks, mostly
        raise RecordsError(f"cannot write a record batch: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class MessageSet:
    data: bytes
    headers_dropped: int


def to_message_set(
    data: bytes | memoryview | None, magic: int, from_offset: int, max_bytes: int
) -> MessageSet:
    """A fetch answer's records as a message set of ``magic`` (0 or 1) for a Fetch v0-3
    client: the records from ``from_offset`` on (a batch starts where it starts, the
    client asked from within it), offsets, keys, values and timestamps exact, headers
    dropped and counted. A batch that was compressed becomes one compressed wrapper
    (zstd, which magic 0/1 lack, is written uncompressed). At most ``max_bytes``, the
    client's partition limit, in whole messages, but at least one message or wrapper,
    as Kafka answers from KIP-74 on (the client's limit was the upstream's, and its
    batches are smaller than the messages they become)."""
    out = bytearray()
    dropped = 0
    for batch in read_batches(data):
        records = [r for r in batch.records if r.offset >= from_offset]
        chunks: list[tuple[bytes, list[Record]]]
        if batch.compression in (GZIP, SNAPPY, LZ4) and records:
            chunks = [(_wrapper(records, magic, batch.compression, batch.timestamp_type), records)]
        else:  # message by message, so the limit cuts between any two
            chunks = [(_message(r, magic, batch.timestamp_type), [r]) for r in records]
        for chunk, taken in chunks:
            if out and len(out) + len(chunk) > max_bytes:
                return MessageSet(bytes(out), dropped)
            out += chunk
            dropped += sum(r.headers for r in taken)
    return MessageSet(bytes(out), dropped)


def _attributes(compression: int, timestamp_type: int, magic: int) -> int:
    if magic and timestamp_type == LOG_APPEND_TIME:
        return compression | _TIMESTAMP_TYPE_BIT
    return compression


def _encode(
    offset: int, magic: int, attributes: int, timestamp: int, key: Any, value: Any
) -> bytes:
    body = bytearray()
    for part in (key, value):
        if part is None:
            body += _LENGTH.pack(-1)
        else:
            body += _LENGTH.pack(len(part))
            body += part
    if magic == 0:
        head = _HEAD_V0.pack(offset, _HEAD_V0.size - 12 + len(body), 0, 0, attributes)
    else:
        head = _HEAD_V1.pack(offset, _HEAD_V1.size - 12 + len(body), 0, 1, attributes, timestamp)
    message = bytearray(head) + body
    # The CRC covers everything after itself: magic, attributes, [timestamp,] key, value.
    struct.pack_into(">I", message, 12, zlib.crc32(memoryview(message)[16:]))
    return bytes(message)


def _message(record: Record, magic: int, timestamp_type: int) -> bytes:
    return _encode(
        record.offset,
        magic,
        _attributes(NO_COMPRESSION, timestamp_type, magic),
        record.timestamp,
        record.key,
        record.value,
    )


_COMPRESS: dict[tuple[int, int], Callable[[bytes], bytes]] = {
    (GZIP, 0): codec.gzip_encode,
    (GZIP, 1): codec.gzip_encode,
    (SNAPPY, 0): codec.snappy_encode,
    (SNAPPY, 1): codec.snappy_encode,
    (LZ4, 0): codec.lz4_encode_old_kafka,  # magic 0's LZ4 framing was Kafka's own, broken one
    (LZ4, 1): codec.lz4_encode,
}


def _wrapper(records: list[Record], magic: int, compression: int, timestamp_type: int) -> bytes:
    """One compressed wrapper: inner offsets relative (magic 1, KIP-31) or absolute
    (magic 0); the wrapper's offset is the last inner one's absolute offset, and with
    LogAppendTime its timestamp stands for every inner message's."""
    inner = b"".join(
        _encode(
            r.offset - records[0].offset if magic else r.offset,
            magic,
            NO_COMPRESSION,
            r.timestamp,
            r.key,
            r.value,
        )
        for r in records
    )
    try:
        compressed = _COMPRESS[(compression, magic)](inner)
    except Exception as exc:
        raise RecordsError(f"cannot compress with codec {compression}: {exc!r}") from exc
    last = records[-1].offset
    newest = max((r.timestamp for r in records), default=NO_TIMESTAMP)
    return _encode(
        last, magic, _attributes(compression, timestamp_type, magic), newest, None, compressed
    )
