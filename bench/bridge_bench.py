#!/usr/bin/env python3
"""What the version bridge costs: CPU per MB to convert Produce v2 up and Fetch down, in
process (``gateway.bridge.convert``, the sans-I/O part every bridged request goes through).

A Produce v2 request of ``--records`` messages (magic 1, ``--value-bytes`` each) is
converted up to v3 (its message set becomes a record batch v2), and a Fetch v4 answer
holding the same records as record batches is brought down to v2 (a message set of magic
1), each uncompressed and gzip. Prints MB/s and CPU ms per MB of record payload, median of
``--rounds``. The socket path (framing, the in-flight table, the event loop) is the
gateway's usual one and is measured by ``datapath_bench.py``; this is what the bridge adds.

``--end-to-end`` also starts Apache Kafka 4.4 and the gateway (one process) in front of
it, and has kafka-python produce (acks=1) and then fetch ``--mb`` MB of 1 KiB records
through it, once pinned to ``api_version=(0, 10)`` (bridged: Produce v2, Fetch v2) and
once at ``(2, 6)`` (Produce v8, Fetch v11: forwarded), and prints each phase's MB/s and
the gateway process's CPU (utime + stime) per MB.

    .venv/bin/python bench/bridge_bench.py
    .venv/bin/python bench/bridge_bench.py --records 1000 --value-bytes 100 --rounds 5
    .venv/bin/python bench/bridge_bench.py --end-to-end --mb 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
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


def _cpu_s(pid: int) -> float:
    """utime + stime of a process, seconds (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def end_to_end(mb: float) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from tests.harness import GatewayProcess
    from tests.harness.apache_kafka import ApacheKafkaBroker
    from tests.integration.test_clients import ConfluentDriver

    records = int(mb * 1e6 / 1024)
    value = bytes(1024)
    with tempfile.TemporaryDirectory() as tmp:
        kafka = ApacheKafkaBroker(Path(tmp) / "kafka")
        kafka.start()
        gateway = GatewayProcess(Path(tmp), kafka.bootstrap, extra_args=["--workers", "1"])
        gateway.start()
        try:
            assert gateway.pid is not None
            print(
                f"\nend to end, Kafka 4.4 behind the gateway (1 process): {records} records "
                f"of 1 KiB ({mb:g} MB)"
            )
            print(f"{'client':<34} {'phase':<8} {'MB/s':>8} {'gateway CPU ms/MB':>18}")
            for label, api_version in (
                ("kafka-python (0, 10): bridged", (0, 10)),
                ("kafka-python (2, 6): forwarded", (2, 6)),
            ):
                topic = f"bench-{api_version[0]}-{api_version[1]}-{int(time.time())}"
                ConfluentDriver().create_topic(gateway.bootstrap, topic)
                producer = KafkaProducer(
                    bootstrap_servers=gateway.bootstrap,
                    acks=1,
                    api_version=api_version,
                    linger_ms=5,
                    batch_size=256 * 1024,
                )
                cpu, wall = _cpu_s(gateway.pid), time.monotonic()
                for _ in range(records):
                    producer.send(topic, value=value, partition=0)
                producer.flush()
                _row(label, "produce", mb, time.monotonic() - wall, _cpu_s(gateway.pid) - cpu)
                producer.close()
                consumer = KafkaConsumer(
                    bootstrap_servers=gateway.bootstrap,
                    api_version=api_version,
                    enable_auto_commit=False,
                    max_partition_fetch_bytes=1 << 20,
                )
                partition = TopicPartition(topic, 0)
                consumer.assign([partition])
                consumer.seek_to_beginning(partition)
                got = 0
                cpu, wall = _cpu_s(gateway.pid), time.monotonic()
                while got < records:
                    got += sum(len(b) for b in consumer.poll(timeout_ms=1000).values())
                _row(label, "fetch", mb, time.monotonic() - wall, _cpu_s(gateway.pid) - cpu)
                consumer.close()
        finally:
            gateway.stop()
            kafka.stop()


def _row(label: str, phase: str, mb: float, wall: float, cpu: float) -> None:
    print(f"{label:<34} {phase:<8} {mb / wall:>8.1f} {cpu * 1000 / mb:>18.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--end-to-end", action="store_true", help="also through a gateway")
    parser.add_argument("--mb", type=float, default=20.0, help="--end-to-end: MB each way")
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
    if args.end_to_end:
        end_to_end(args.mb)


if __name__ == "__main__":
    main()
