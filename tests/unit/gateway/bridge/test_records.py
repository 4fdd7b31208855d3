"""Message sets and record batches, one into the other: keys, values, nulls, timestamps
and offsets exact, compression kept, headers dropped and counted."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from gateway.bridge import records
from gateway.bridge.records import (
    GZIP,
    LZ4,
    NO_COMPRESSION,
    SNAPPY,
    to_message_set,
    to_record_batch,
)

# Every codec a message set can carry: the gateway depends on snappy's and lz4's libraries.
CODECS = [NO_COMPRESSION, GZIP, SNAPPY, LZ4]


def _values(i: int) -> tuple[bytes | None, bytes | None]:
    key = None if i % 7 == 3 else b"key-%d" % i
    value = None if i % 11 == 5 else b"value-%d-" % i + b"x" * 50
    return key, value


def _read(data: bytes) -> list[tuple[int, int | None, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp, r.key, r.value) for b in MemoryRecords(data) for r in b]


def _batch(base: int, count: int, compression: int, log_append: int | None = None) -> bytes:
    builder = DefaultRecordBatchBuilder(2, compression, False, -1, -1, -1, 1 << 24)
    for i in range(count):
        headers = [("h", b"x")] if i % 5 == 1 else []
        builder.append(i, 5000 + i, *_values(base + i), headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)  # the broker's offsets
    if log_append is not None:  # the broker's LogAppendTime: attribute bit and max timestamp
        data[22] |= 0x08
        struct.pack_into(">q", data, 35, log_append)
    return bytes(data)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", CODECS)
def test_produce_message_sets_become_one_record_batch(magic: int, compression: int) -> None:
    builder = MemoryRecordsBuilder(magic, compression, 1 << 24)
    for i in range(40):
        builder.append(timestamp=1000 + i, key=_values(i)[0], value=_values(i)[1])
    builder.close()
    batch = to_record_batch(bytes(builder.buffer()))
    assert batch is not None
    (only,) = list(MemoryRecords(batch))
    assert only.magic == 2 and only.compression_type == compression
    expected = [(i, 1000 + i if magic else -1, *_values(i)) for i in range(40)]
    assert _read(batch) == expected


def test_produce_of_several_wrappers_keeps_every_record() -> None:
    data = b""
    for part in range(3):
        builder = MemoryRecordsBuilder(1, GZIP, 1 << 24)
        for i in range(10):
            builder.append(timestamp=i, key=b"%d" % part, value=b"v" * 100)
        builder.close()
        data += bytes(builder.buffer())
    assert [r[0] for r in _read(to_record_batch(data) or b"")] == list(range(30))
    assert to_record_batch(None) is None and to_record_batch(b"") == b""


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", CODECS)
def test_fetched_batches_become_message_sets(magic: int, compression: int) -> None:
    data = _batch(100, 20, compression) + _batch(120, 20, compression)
    converted = to_message_set(data, magic, 105, 1 << 20)
    got = _read(converted.data)
    assert got == [
        (o, (5000 + (o - 100) % 20) if magic else None, *_values(o)) for o in range(105, 140)
    ]
    # Headers of records 106, 111, ...: dropped, counted.
    assert converted.headers_dropped == len([o for o in range(105, 140) if (o - 100) % 20 % 5 == 1])
    wrappers = list(MemoryRecords(converted.data))
    if compression:
        assert len(wrappers) == 2 and {w.compression_type for w in wrappers} == {compression}
        assert all(w.validate_crc() for w in wrappers)
    else:
        assert len(wrappers) == 35


def test_log_append_time_is_the_batch_time() -> None:
    for compression in (NO_COMPRESSION, GZIP):
        data = _batch(0, 10, compression, log_append=777)
        got = list(MemoryRecords(to_message_set(data, 1, 0, 1 << 20).data))
        assert all(r.timestamp == 777 and r.timestamp_type == 1 for b in got for r in b)


def test_max_bytes_in_whole_messages_but_at_least_one() -> None:
    data = _batch(0, 50, NO_COMPRESSION)
    whole = to_message_set(data, 1, 0, 1 << 20).data
    size = len(whole) // 50
    part = to_message_set(data, 1, 0, 10 * size + size // 2).data
    assert [r[0] for r in _read(part)] == list(range(10))
    assert [r[0] for r in _read(to_message_set(data, 1, 0, 1).data)] == [0]
    gz = _batch(0, 50, GZIP) + _batch(50, 50, GZIP)
    assert len(list(MemoryRecords(to_message_set(gz, 1, 0, 1).data))) == 1


def test_a_partial_last_batch_is_left_out() -> None:
    data = _batch(0, 5, NO_COMPRESSION) + _batch(5, 5, NO_COMPRESSION)[:30]
    assert [r[0] for r in _read(to_message_set(data, 1, 0, 1 << 20).data)] == list(range(5))


def test_corrupt_records_raise() -> None:
    with pytest.raises(records.RecordsError):
        to_record_batch(b"\x00" * 8 + b"\x00\x00\x00\x20" + b"\x00" * 4 + b"\x07" + b"\x00" * 27)
