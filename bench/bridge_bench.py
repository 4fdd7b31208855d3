#!/usr/bin/env python3
"""What the version bridge costs: CPU per MB to convert Produce v2 up and Fetch down, in
process (``gateway.bridge.convert``, the sans-I/O part every bridged request goes through).

A Produce v2 request of ``--records`` messages (magic 1, ``--value-bytes`` each) is
converted up to v3 (its message set becomes a record batch v2), and a Fetch v4 answer
holding the same records as record batches is brought down to v2 (a message set of magic
1), each uncompressed and gzip. Prints MB/s and CPU ms per MB of record payload, median of
``--rounds``. The socket path (framing, the in-flight table, the event loop) is the
gateway's usual one and is measured by ``datapath_bench.py``; this is what the bridge adds.

    .venv/bin/python bench/bridge_bench.py
    .venv/bin/python bench/bridge_bench.py --records 1000 --value-bytes 100 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecordsBuilder

from gateway.bridge.convert import request_up, response_down
from gateway.bridge.messages import encode

CODECS = {"none": 0, "gzip": 1}


def produce_v2(records: int, value_bytes: int, codec: int) -> bytes:
    builder = MemoryRecordsBuilder(1, codec, 1 << 30)
    for i in range(records):
        builder.append(timestamp=1_700_000_000_000 + i, key=b"key-%d" % i, value=bytes(value_bytes))
    builder.close()
    return encode(
        "ProduceRequest",
        2,
        {
            "Acks": -1,
            "TimeoutMs": 30000,
            "TopicData": [
                {
                    "Name": "bench",
                    "PartitionData": [{"Index": 0, "Records": bytes(builder.buffer())}],
                }
            ],
        },
    )


def fetch_v4_answer(records: int, value_bytes: int, codec: int, per_batch: int = 200) -> bytes:
    data = bytearray()
    for base in range(0, records, per_batch):
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
        for i in range(min(per_batch, records - base)):
            builder.append(
                i, 1_700_000_000_000 + base + i, b"key-%d" % (base + i), bytes(value_bytes), []
            )
        batch = bytearray(builder.build())
        struct.pack_into(">q", batch, 0, base)
        data += batch
    return encode(
        "FetchResponse",
        4,
        {
            "Responses": [
                {
                    "Topic": "bench",
                    "Partitions": [
                        {"PartitionIndex": 0, "HighWatermark": records, "Records": bytes(data)}
                    ],
                }
            ]
        },
    )


def measure(work: Callable[[], object], rounds: int) -> float:
    """Median CPU seconds of one call."""
    times = []
    for _ in range(rounds):
        started = time.process_time()
        work()
        times.append(time.process_time() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    payload_mb = args.records * args.value_bytes / 1e6
    print(
        f"{args.records} records of {args.value_bytes} B ({payload_mb:.1f} MB of values), "
        f"median of {args.rounds}"
    )
    print(f"{'conversion':<34} {'MB/s':>8} {'CPU ms/MB':>10}")
    for name, codec in CODECS.items():
        produce = produce_v2(args.records, args.value_bytes, codec)
        answer = fetch_v4_answer(args.records, args.value_bytes, codec)
        fetched = {("bench", 0): (0, 1 << 30)}
        rows = (
            (f"Produce v2 -> v3, {name}", lambda p=produce: request_up(0, 2, 3, p)),
            (
                f"Fetch v4 -> v2 (magic 1), {name}",
                lambda a=answer, f=fetched: response_down(1, 4, 2, a, f),
            ),
        )
        for label, work in rows:
            cpu = measure(work, args.rounds)
            print(f"{label:<34} {payload_mb / cpu:>8.0f} {cpu * 1000 / payload_mb:>10.2f}")


if __name__ == "__main__":
    main()
