"""The bridge's bound on inflating records: compressed message sets and record batches
that inflate past it are refused before kafka-python decompresses them whole, with
little memory; ordinary ones convert as before."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecordsBuilder

from gateway.bridge import inflate, records
from gateway.bridge.records import RecordsError

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
LIMIT = 16 << 20


def _message_set(magic: int, codec: int, values: list[bytes]) -> bytes:
    builder = MemoryRecordsBuilder(magic, codec, 1 << 30)
    for value in values:
        builder.append(timestamp=1, key=b"k", value=value)
    builder.close()
    return bytes(builder.buffer())


def _batch(codec: int, values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
    for i, value in enumerate(values):
        builder.append(i, 1, b"k", value, [])
    return bytes(builder.build())


CASES = [(m, c) for m in (0, 1) for c in (GZIP, SNAPPY, LZ4)]


@pytest.mark.parametrize(("magic", "codec"), CASES)
def test_a_message_set_that_inflates_past_the_bound_is_refused(magic: int, codec: int) -> None:
    bomb = _message_set(magic, codec, [bytes(LIMIT), bytes(1024)])
    tracemalloc.start()
    try:
        with pytest.raises(inflate.TooLarge):
            inflate.check(bomb, LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < LIMIT // 4  # measured in 1 MiB steps, never held whole
    inflate.check(_message_set(magic, codec, [bytes(LIMIT // 2)]), LIMIT)  # within: fine


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_record_batches_are_bounded_too(codec: int) -> None:
    with pytest.raises(inflate.TooLarge):
        inflate.check(_batch(codec, [bytes(LIMIT // 2)] * 3), LIMIT)
    inflate.check(_batch(codec, [bytes(LIMIT // 4)] * 3), LIMIT)


def test_the_bound_is_for_all_the_records_together() -> None:
    two = _message_set(1, GZIP, [bytes(LIMIT // 2 + 1)]) * 2
    with pytest.raises(inflate.TooLarge):
        inflate.check(two, LIMIT)


def test_snappy_is_held_to_the_lengths_its_blocks_declare() -> None:
    # Raw snappy claiming 2 GiB in a few bytes: python-snappy would allocate it first.
    raw = b"\xff\xff\xff\xff\x07" + b"\x00" * 8
    # A magic 1 message by hand (offset, size, CRC unchecked here, magic, attributes:
    # snappy, timestamp, null key, the value).
    message = struct.pack(">IbbqiI", 0, 1, SNAPPY, 1, -1, len(raw)) + raw
    lying = struct.pack(">qi", 0, len(message)) + message
    with pytest.raises(inflate.TooLarge):
        inflate.check(lying, LIMIT)


def test_corrupt_or_partial_records_are_left_to_kafka_python() -> None:
    whole = _message_set(1, GZIP, [b"v" * 1000])
    inflate.check(whole[:-5], LIMIT)  # a partial last entry: not read
    broken = bytearray(whole)
    broken[-20] ^= 0xFF
    inflate.check(bytes(broken), LIMIT)  # does not inflate: not counted
    with pytest.raises(RecordsError):
        records.read_batches(bytes(broken))


def test_the_bridge_refuses_a_bomb_as_records_it_cannot_read() -> None:
    bomb = _message_set(1, GZIP, [bytes(inflate.MAX_INFLATED_BYTES + 1)])
    with pytest.raises(RecordsError, match="inflate past"):
        records.to_record_batch(bomb)
    fetched = _batch(GZIP, [bytes(inflate.MAX_INFLATED_BYTES // 2 + 1)] * 2)
    with pytest.raises(RecordsError, match="inflate past"):
        records.to_message_set(fetched, 1, 0, 1 << 20)
