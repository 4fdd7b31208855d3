#!/usr/bin/env python3
"""What the version bridge costs: CPU per MB to convert Produce v2 up and Fetch down, in
process (``gateway.bridge.convert``, the sans-I/O part every bridged request goes through).

A Produce v2 request of ``--records`` messages (magic 1, ``--value-bytes`` each) is
converted up to v3 (its message set becomes a record batch v2), and a Fetch v4 answer
holding the same records as record batches is brought down to v2 (a message set of magic
1), each uncompressed, gzip, snappy and lz4. Prints MB/s and CPU ms per MB of record
payload, median of ``--rounds``. The socket path (framing, the in-flight table, the event
loop) is the gateway's usual one and is measured by ``datapath_bench.py``; this is what the
bridge adds.

``--end-to-end`` also has kafka-python produce (acks=1) and then fetch ``--mb`` MB of 1 KiB
records pinned to ``api_version=(0, 10)`` (Produce v2, Fetch v2) straight to Apache Kafka
3.9 (ZooKeeper mode; the baseline: 3.9 still serves it, down-converting fetches itself),
then through the gateway (one process) in front of Kafka 4.4 (bridged), and at ``(2, 6)``
(Produce v8, Fetch v11: forwarded) through the same gateway, and prints each phase's
MB/s and the gateway's and the broker's CPU (utime + stime) per MB.

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

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}


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


def _phases(
    label: str, bootstrap: str, api_version: tuple[int, int], records: int, pids: list[int | None]
) -> None:
    """kafka-python at ``api_version`` produces then fetches ``records`` 1 KiB records via
    ``bootstrap``; a row per phase with the CPU of each process in ``pids`` (gateway,
    broker; None: not there)."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    mb = records * 1024 / 1e6
    value = bytes(1024)
    topic = f"bench-{api_version[0]}-{api_version[1]}-{time.time_ns()}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        api_version=api_version,
        linger_ms=5,
        batch_size=256 * 1024,
    )
    cpu, wall = _cpus(pids), time.monotonic()
    for _ in range(records):
        producer.send(topic, value=value, partition=0)
    producer.flush()
    _row(label, "produce", mb, time.monotonic() - wall, _spent(pids, cpu))
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        api_version=api_version,
        enable_auto_commit=False,
        max_partition_fetch_bytes=1 << 20,
    )
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    got = 0
    cpu, wall = _cpus(pids), time.monotonic()
    while got < records:
        got += sum(len(b) for b in consumer.poll(timeout_ms=1000).values())
    _row(label, "fetch", mb, time.monotonic() - wall, _spent(pids, cpu))
    consumer.close()


def _cpus(pids: list[int | None]) -> list[float]:
    return [0.0 if pid is None else _cpu_s(pid) for pid in pids]


def _spent(pids: list[int | None], before: list[float]) -> list[float | None]:
    return [
        None if pid is None else after - b
        for pid, b, after in zip(pids, before, _cpus(pids), strict=True)
    ]


def end_to_end(mb: float) -> None:
    """The same old client direct to Kafka 3.9 (which still serves it, down-converting
    fetches itself) and through the gateway's bridge to Kafka 4.4; a modern client
    through the gateway beside it."""
    from tests.harness import GatewayProcess
    from tests.harness.apache_kafka import (
        KRAFT_VERSION,
        ZOOKEEPER_MODE_VERSION,
        ApacheKafkaBroker,
    )
    from tests.harness.ports import LOOPBACK
    from tests.harness.procs import ZooKeeperProcess

    records = int(mb * 1e6 / 1024)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"\nend to end: {records} records of 1 KiB ({mb:g} MB) each way, kafka-python")
        print(
            f"{'client and path':<44} {'phase':<8} {'MB/s':>7} "
            f"{'gateway CPU ms/MB':>18} {'broker CPU ms/MB':>17}"
        )
        zookeeper = ZooKeeperProcess(Path(tmp))
        zookeeper.start()
        old = ApacheKafkaBroker(
            Path(tmp) / "kafka-3.9",
            version=ZOOKEEPER_MODE_VERSION,
            zookeeper=zookeeper.connect_string,
            advertised_host=LOOPBACK,  # direct: its clients follow its own address
        )
        old.start()
        try:
            _phases(
                f"(0, 10) direct to Kafka {ZOOKEEPER_MODE_VERSION}",
                old.bootstrap,
                (0, 10),
                records,
                [None, old.pid],
            )
        finally:
            old.stop()
            zookeeper.stop()
        kafka = ApacheKafkaBroker(Path(tmp) / "kafka")
        kafka.start()
        gateway = GatewayProcess(Path(tmp), kafka.bootstrap, extra_args=["--workers", "1"])
        gateway.start()
        try:
            for label, api_version in (
                (f"(0, 10) bridged to Kafka {KRAFT_VERSION}", (0, 10)),
                (f"(2, 6) forwarded to Kafka {KRAFT_VERSION}", (2, 6)),
            ):
                _phases(label, gateway.bootstrap, api_version, records, [gateway.pid, kafka.pid])
        finally:
            gateway.stop()
            kafka.stop()


def _row(label: str, phase: str, mb: float, wall: float, cpu: list[float | None]) -> None:
    per_mb = ["-" if c is None else f"{c * 1000 / mb:.2f}" for c in cpu]
    print(f"{label:<44} {phase:<8} {mb / wall:>7.1f} {per_mb[0]:>18} {per_mb[1]:>17}")


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
