#!/usr/bin/env python3
"""Soak: a real gateway under mixed load, attackers and faults for minutes or hours (issue 34).

One run starts real parts with the test harness (``tests/harness``): ZooKeeper, a broker
(Apache Kafka 4.4 in KRaft mode by default, ``--broker tansu`` for Tansu) advertising an
unresolvable host, and ``python -m gateway --workers 2`` in front of it with a metrics
listener and short connection limits (a TOML ``--config``). Then, for ``--duration``
seconds, all at once:

* load: a confluent-kafka idempotent acks=all producer writing sequence-numbered records
  at ``--rate``; a confluent-kafka consumer group reading them; kafka-python and aiokafka
  clients that connect, produce or read metadata a little, close, and start over;
* attackers the limits must cut: silent connections, slow senders (a frame header, then a
  byte at a time), frames announced larger than the limit or left half sent, connections
  that go idle after one request, more connections from one address than its cap;
* faults on a schedule: SIGHUP every ``--reload-every`` s, and once per ``--fault-cycle``
  a worker SIGKILL, a ZooKeeper restart and a broker restart (same port and data dir);
* a sampler every ``--sample-every`` s: RSS and open fds of every gateway process
  (supervisor, fork server, resource tracker, each worker; found by pid tree in /proc),
  and /healthz and /readyz (answered? status, latency).

At the end: one JSON report (``--out``) and a short table on stdout. Exit status 1 when
an acked record was never consumed, the gateway's log holds a traceback, a process's RSS
grew faster than ``--max-rss-slope`` MB/min over the second half of the run, or the
gateway still counts client connections or queued bytes once every client is gone; 2
when the parts could not be started. bench/README.md ("Soak") explains the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.wire import API_VERSIONS, request_frame
from tests.harness import LOOPBACK, GatewayProcess, HarnessError, TansuBroker, ZooKeeperProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.harness.procs import ManagedProcess

#: The two brokers the soak can start (both restart on the same port and data dir).
Broker = ApacheKafkaBroker | TansuBroker

TOPIC = "soak-seq"
CHURN_TOPIC = "soak-churn"
PARTITIONS = 3
MiB = 1 << 20
TRACEBACK = "Traceback (most recent call last)"

#: Limits the soak runs under: short, so that attackers are cut within seconds and a
#: limit-closed connection happens hundreds of times a minute. The consumer's heartbeat
#: (3 s) must stay under the idle limit, or its coordinator connection would be cut too.
LIMITS: dict[str, Any] = {
    "connections_max_idle_ms": 5000,
    "connection_first_request_timeout_ms": 2000,
    "max_connections_per_ip": 8,
    # The soak's own clients all come from 127.0.0.1; attackers from other loopback
    # addresses, so the per-IP cap cuts attackers only.
    "max_connections_per_ip_overrides": f"{LOOPBACK}:1000",
    "max_frame_bytes": 1 * MiB,
}


# --------------------------------------------------------------------------- /proc


def gateway_processes(supervisor: int) -> dict[int, str]:
    """{pid: role} of the gateway's process tree: the supervisor, its children (the fork
    server, multiprocessing's resource tracker) and the fork server's children (workers)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                # The command name in (...) may hold spaces: split after its ")".
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    roles = {supervisor: "supervisor"}
    for pid, parent in parents.items():
        if parent != supervisor:
            continue
        cmdline = _cmdline(pid)
        if "forkserver" in cmdline:
            roles[pid] = "forkserver"
            roles |= {child: "worker" for child, up in parents.items() if up == pid}
        elif "resource_tracker" in cmdline:
            roles[pid] = "resource_tracker"
        else:
            roles[pid] = "child"
    return roles


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def start_ticks(pid: int) -> int:
    """When the process started (clock ticks after boot; 0 when it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def fd_count(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def http_get(url: str, timeout_s: float) -> tuple[int | None, float, str]:
    """(status or None when unanswered, seconds, body or error)."""
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = response.read().decode(errors="replace").strip()
            return response.status, time.perf_counter() - start, body
    except urllib.error.HTTPError as exc:  # answered, with a 503
        return exc.code, time.perf_counter() - start, exc.read().decode(errors="replace").strip()
    except (OSError, TimeoutError) as exc:
        return None, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- shared state


@dataclass
class Ledger:
    """What the producer had acked and what the consumer read, by sequence number.

    bytearrays indexed by sequence number and by offset keep an hours-long run's
    bookkeeping small (a byte per record)."""

    acked: bytearray = field(default_factory=bytearray)
    consumed: bytearray = field(default_factory=bytearray)  # reads per seq, capped at 255
    offsets: dict[int, bytearray] = field(default_factory=dict)  # partition -> seen
    sent: int = 0
    produce_failed: int = 0
    produce_errors: dict[str, int] = field(default_factory=dict)
    producer_fatal: list[str] = field(default_factory=list)
    consumer_errors: dict[str, int] = field(default_factory=dict)
    reads: int = 0
    redelivered: int = 0  # the same (partition, offset) read again: at-least-once
    foreign: int = 0  # values that are not a sequence number of this run
    outstanding: int = 0  # acked, not consumed yet
    lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def _mark(array: bytearray, index: int) -> int:
        if index >= len(array):
            array.extend(bytes(max(index + 1 - len(array), 65536)))
        array[index] = min(array[index] + 1, 255)
        return array[index]

    def ack(self, seq: int) -> None:
        with self.lock:
            if self._mark(self.acked, seq) == 1 and not self._at(self.consumed, seq):
                self.outstanding += 1

    def read(self, partition: int, offset: int, seq: int) -> None:
        with self.lock:
            self.reads += 1
            seen = self.offsets.setdefault(partition, bytearray())
            if self._mark(seen, offset) > 1:
                self.redelivered += 1
                return
            # A record may be read before its delivery report is served: either order.
            if self._mark(self.consumed, seq) == 1 and self._at(self.acked, seq):
                self.outstanding -= 1

    def missing(self) -> int:
        """Acked records not consumed yet (kept as a count: an hours-long run's drain
        asks twice a second)."""
        with self.lock:
            return self.outstanding

    @staticmethod
    def _at(array: bytearray, index: int) -> int:
        return array[index] if index < len(array) else 0


def count(table: dict[str, int], key: str) -> None:
    table[key] = table.get(key, 0) + 1


# --------------------------------------------------------------------------- load


def client_logger(path: Path) -> logging.Logger:
    """Client libraries' complaints (every reconnect through a fault) go to a file, not
    the table on stdout."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    # aiokafka and kafka-python log every failed churn attempt at ERROR: keep the file
    # readable; the counts are in the report.
    for name in ("kafka", "aiokafka"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return logging.getLogger("soak.librdkafka")


def producer_loop(
    bootstrap: str, rate: float, ledger: Ledger, stop: threading.Event, logger: logging.Logger
) -> None:
    """Sequence-numbered records at ``rate``/s, idempotent, acks=all; the delivery report
    is the ack. A fatal idempotence error (which librdkafka cannot recover from) is
    recorded and a new producer takes over, so the run goes on and the report says so."""
    from confluent_kafka import KafkaError, Producer

    fatal = threading.Event()

    def on_error(err: KafkaError) -> None:
        if err.fatal():
            ledger.producer_fatal.append(str(err))
            fatal.set()

    def make() -> Producer:
        return Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "logger": logger,
                "error_cb": on_error,
            }
        )

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            ledger.ack(int(msg.value()))
        else:
            ledger.produce_failed += 1
            count(ledger.produce_errors, err.name())

    producer = make()
    seq, start = 0, time.monotonic()
    try:
        while not stop.is_set():
            if fatal.is_set():
                producer.flush(10)
                fatal.clear()
                producer = make()
            due = start + seq / rate
            while seq < (time.monotonic() - start) * rate and not stop.is_set():
                try:
                    producer.produce(
                        TOPIC, str(seq).encode(), key=str(seq % 97).encode(), on_delivery=delivered
                    )
                except BufferError:  # queue full (a long outage): wait, same seq again
                    break
                seq += 1
                ledger.sent = seq
            producer.poll(max(0.0, min(0.05, due - time.monotonic())))
    finally:
        # Everything produced gets its answer (ack or error) before the ledger is read.
        producer.flush(60)


def consumer_loop(
    bootstrap: str, ledger: Ledger, stop: threading.Event, logger: logging.Logger
) -> None:
    from confluent_kafka import Consumer, KafkaError

    def on_error(err: KafkaError) -> None:
        count(ledger.consumer_errors, err.name())

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "soak",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 1000,
            "logger": logger,
            "error_cb": on_error,
        }
    )
    consumer.subscribe([TOPIC])
    try:
        while not stop.is_set():
            for msg in consumer.consume(500, 0.5):
                if msg.error():
                    count(ledger.consumer_errors, msg.error().name())
                    continue
                try:
                    seq = int(msg.value())
                except (TypeError, ValueError):
                    ledger.foreign += 1
                    continue
                ledger.read(msg.partition(), msg.offset(), seq)
    finally:
        consumer.close()


@dataclass
class Churn:
    attempts: dict[str, int] = field(default_factory=dict)
    ok: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)


def kafka_python_churn(bootstrap: str, churn: Churn, stop: threading.Event) -> None:
    """kafka-python clients that live for a request or two: connect, produce a record or
    read the topic list, close; again, every ~0.5 s. Failures (during a broker restart)
    are counted, not raised."""
    from kafka import KafkaConsumer, KafkaProducer

    turn = 0
    while not stop.is_set():
        kind = "kafka-python produce" if turn % 2 == 0 else "kafka-python metadata"
        count(churn.attempts, kind)
        try:
            if turn % 2 == 0:
                producer = KafkaProducer(
                    bootstrap_servers=bootstrap,
                    request_timeout_ms=5000,
                    max_block_ms=5000,
                    client_id="soak-churn",
                )
                try:
                    producer.send(CHURN_TOPIC, b"churn").get(timeout=5)
                finally:
                    producer.close(timeout=2)
            else:
                consumer = KafkaConsumer(
                    bootstrap_servers=bootstrap, request_timeout_ms=5000, client_id="soak-churn"
                )
                try:
                    if CHURN_TOPIC not in consumer.topics():
                        raise RuntimeError("churn topic missing from the metadata")
                finally:
                    consumer.close()
            count(churn.ok, kind)
        except Exception as exc:  # any client failure is a figure of the run
            count(churn.failed, f"{kind}: {type(exc).__name__}")
        turn += 1
        stop.wait(0.5)


def aiokafka_churn(bootstrap: str, churn: Churn, stop: threading.Event) -> None:
    """aiokafka producers that start, send one record and stop, every ~0.5 s."""
    from aiokafka import AIOKafkaProducer

    async def once() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, request_timeout_ms=5000, client_id="soak-churn-aio"
        )
        await asyncio.wait_for(producer.start(), 10)
        try:
            await asyncio.wait_for(producer.send_and_wait(CHURN_TOPIC, b"churn"), 10)
        finally:
            await asyncio.wait_for(producer.stop(), 10)

    async def run() -> None:
        while not stop.is_set():
            count(churn.attempts, "aiokafka produce")
            try:
                await once()
                count(churn.ok, "aiokafka produce")
            except Exception as exc:  # counted, as above
                count(churn.failed, f"aiokafka produce: {type(exc).__name__}")
            await asyncio.sleep(0.5)

    asyncio.run(run())


# --------------------------------------------------------------------------- attackers


def api_versions_v0(correlation_id: int) -> bytes:
    """An ApiVersions v0 request frame (header v1, empty body): the first request of the
    attacker that then goes silent."""
    return request_frame(API_VERSIONS, 0, correlation_id, b"", "soak-attacker")


@dataclass(frozen=True)
class Attack:
    """One kind of hostile connection: where it comes from (its own address, so the
    per-IP cap counts each kind apart), how many at once, and which limit must cut it
    (and so by when); what it sends is in ``attackers_loop``."""

    name: str
    source: str
    concurrency: int
    limit: str


ATTACKS = (
    Attack("idle", "127.0.0.2", 6, "connection_first_request_timeout_ms"),
    Attack("slow_sender", "127.0.0.3", 4, "connection_first_request_timeout_ms"),
    Attack("large_frame_partial", "127.0.0.4", 3, "connection_first_request_timeout_ms"),
    Attack("oversized_frame", "127.0.0.6", 2, "max_frame_bytes"),
    Attack("idle_after_request", "127.0.0.7", 4, "connections_max_idle_ms"),
    # cap + 4 at once from one address: 4 are refused at accept, the rest are silent.
    Attack("per_ip_flood", "127.0.0.5", 12, "max_connections_per_ip"),
)

#: What the large-frame attacker sends of its frame before it stalls.
PARTIAL_BYTES = 768 * 1024
#: Slack on a deadline before a cut counts as late: the box has 2 shared cores.
CUT_SLACK_S = 3.0
#: After deadline + this, a connection the gateway still holds counts as never cut.
NEVER_S = 15.0


@dataclass
class AttackStats:
    opened: int = 0
    cut: int = 0  # closed by the gateway by its limit's deadline (+ CUT_SLACK_S)
    late: int = 0
    never: int = 0
    refused: int = 0  # connect() itself failed
    # When (s after the load started) one was closed well before its limit's deadline:
    # refused at accept over the per-IP cap, accepted while the broker was down (the
    # gateway closes a client it cannot connect upstream), held by the killed worker.
    early_at: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # open to cut, those not early

    def summary(self, faults: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: getattr(self, k) for k in ("opened", "cut", "late", "never", "refused")
        }
        during = sum(1 for t in self.early_at if fault_at(t, faults))
        out["closed_early"] = {"during_a_fault": during, "otherwise": len(self.early_at) - during}
        if self.times:
            ordered = sorted(self.times)
            out["cut_after_s_p50"] = round(ordered[len(ordered) // 2], 2)
            out["cut_after_s_max"] = round(ordered[-1], 2)
        return out


def attackers_loop(
    attacks: list[Attack],
    t0: float,
    host: str,
    port: int,
    limits: dict[str, Any],
    stats: dict[str, AttackStats],
    stop: threading.Event,
) -> None:
    first_ms = limits["connection_first_request_timeout_ms"]
    deadlines = {
        "connection_first_request_timeout_ms": first_ms,
        "connections_max_idle_ms": limits["connections_max_idle_ms"],
        "max_frame_bytes": 0,
        "max_connections_per_ip": first_ms,
    }

    async def one(attack: Attack, index: int) -> None:
        st = stats[attack.name]
        deadline = deadlines[attack.limit] / 1000
        start = time.monotonic()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, local_addr=(attack.source, 0)), 5
            )
        except (OSError, TimeoutError):
            st.refused += 1
            return
        st.opened += 1
        trickle: asyncio.Task[None] | None = None
        try:
            if attack.name == "slow_sender":
                writer.write(struct.pack(">i", 200))  # a 200-byte frame, then a byte a 0.3 s

                async def drip() -> None:
                    while True:
                        await asyncio.sleep(0.3)
                        writer.write(b"\0")

                trickle = asyncio.create_task(drip())
            elif attack.name == "large_frame_partial":
                # Under max_frame_bytes, so the gateway buffers what came: 768 KiB of a
                # 1 MB frame that never completes (the buffers a cut must give back; a
                # worker that kept them would grow by tens of MB a minute).
                writer.write(struct.pack(">i", 1_000_000) + bytes(PARTIAL_BYTES))
            elif attack.name == "oversized_frame":
                writer.write(struct.pack(">i", 64 * MiB) + bytes(1024))
            elif attack.name == "idle_after_request":
                writer.write(api_versions_v0(index))
                size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))[0]
                await asyncio.wait_for(reader.readexactly(size), 10)
                start = time.monotonic()  # idle from the answer on
            await writer.drain()
            closed = await wait_closed(reader, deadline + NEVER_S)
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            closed = True  # reset while sending or reading the answer: cut
        finally:
            if trickle is not None:
                trickle.cancel()
            writer.close()
        took = time.monotonic() - start
        if not closed:
            st.never += 1
        elif took > deadline + CUT_SLACK_S:
            st.late += 1
        else:
            st.cut += 1
            if took < deadline - 0.5:
                st.early_at.append(time.monotonic() - t0)
            else:
                st.times.append(took)

    async def wave(attack: Attack) -> None:
        round_no = 0
        while not stop.is_set():
            await asyncio.gather(
                *(one(attack, round_no * 100 + i) for i in range(attack.concurrency))
            )
            round_no += 1
            await asyncio.sleep(0.2)

    async def main() -> None:
        waves = [asyncio.create_task(wave(a)) for a in attacks]
        while not stop.is_set():
            await asyncio.sleep(0.2)
        # The connections of the waves under way are dropped, uncounted: waiting for
        # their cuts would hold the end of the run up to NEVER_S.
        for task in waves:
            task.cancel()
        await asyncio.gather(*waves, return_exceptions=True)

    asyncio.run(main())


async def wait_closed(reader: asyncio.StreamReader, patience_s: float) -> bool:
    """True once the peer closed (EOF or reset) within ``patience_s``."""
    end = time.monotonic() + patience_s
    while (left := end - time.monotonic()) > 0:
        try:
            if not await asyncio.wait_for(reader.read(65536), left):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False


# --------------------------------------------------------------------------- sampling


@dataclass
class Sample:
    t: float  # seconds since the load started (negative: before)
    procs: dict[int, tuple[str, int | None, int | None]]  # pid -> (role, rss kB, fds)
    health: tuple[int | None, float, str]
    ready: tuple[int | None, float, str]
    # The gateway's own gauges, summed over its workers (None: /metrics unanswered):
    # client connections open, and bytes held against queued_max_request_bytes.
    connections_active: float | None = None
    queued_bytes: float | None = None


def take_sample(gw: GatewayProcess, t0: float, timeout_s: float) -> Sample:
    assert gw.pid is not None
    procs = {
        pid: (role, rss_kb(pid), fd_count(pid)) for pid, role in gateway_processes(gw.pid).items()
    }
    base = gw.metrics_url.removesuffix("/metrics")
    health = http_get(base + "/healthz", timeout_s)
    ready = http_get(base + "/readyz", timeout_s)
    status, _, text = http_get(gw.metrics_url, timeout_s)
    gauges = metric_sums(text, GAUGES) if status == 200 else {}
    return Sample(time.monotonic() - t0, procs, health, ready,
                  gauges.get(GAUGES[0]), gauges.get(GAUGES[1]))  # fmt: skip


GAUGES = ("kafka_gateway_connections_active", "kafka_gateway_queued_bytes")


def metric_sums(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Each named sample summed over its labels, from Prometheus text."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            sums[name] = sums.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return sums


def sampler_loop(
    gw: GatewayProcess, t0: float, every_s: float, samples: list[Sample], stop: threading.Event
) -> None:
    while not stop.wait(max(0.0, every_s - (time.monotonic() - t0) % every_s)):
        samples.append(take_sample(gw, t0, timeout_s=min(2.0, every_s)))


# --------------------------------------------------------------------------- faults


def schedule(duration_s: float, reload_every_s: float, cycle_s: float) -> list[tuple[float, str]]:
    """(seconds after the load started, fault), in order. Per cycle: a worker kill at 10 %,
    ZooKeeper at 25 %, the broker at 40 % (early, so that the second half of a short run,
    whose RSS slope is judged, starts from settled processes); none in the last 10 s."""
    events = [(t, "reload") for t in _every(reload_every_s, duration_s)]
    start = 0.0
    while cycle_s > 0 and start < duration_s:
        for share, name in (
            (0.10, "worker_kill"),
            (0.25, "zookeeper_restart"),
            (0.40, "broker_restart"),
        ):
            at = start + share * cycle_s
            if at < duration_s - 10:
                events.append((at, name))
        start += cycle_s
    return sorted(events)


def _every(step: float, end: float) -> list[float]:
    return [i * step for i in range(1, int(end / step) + 1) if i * step < end - 1] if step else []


def run_fault(
    name: str, gw: GatewayProcess, zk: ZooKeeperProcess, broker: Broker, broker_kind: str
) -> str:
    """Do one fault; return what was done (the report's line)."""
    assert gw.pid is not None
    if name == "reload":
        os.kill(gw.pid, signal.SIGHUP)
        return "SIGHUP to the supervisor"
    if name == "worker_kill":
        # The youngest worker: the first is killed, then its replacement each cycle, so
        # the other lives through the whole run and its RSS slope covers the second half.
        workers = [p for p, role in gateway_processes(gw.pid).items() if role == "worker"]
        if not workers:
            return "no worker to kill"
        victim = max(workers, key=lambda pid: (start_ticks(pid), pid))
        os.kill(victim, signal.SIGKILL)
        return f"SIGKILL worker {victim}"
    if name == "zookeeper_restart":
        zk.restart()
        return f"ZooKeeper restarted on port {zk.port}"
    if name == "broker_restart":
        if broker_kind == "tansu":
            # Tansu keeps topics in memory: a restart would lose acked records, which
            # says nothing about the gateway.
            return "skipped: Tansu's memory storage loses every record on a restart"
        broker.restart()
        return f"broker restarted on port {broker.port}"
    raise ValueError(name)


# --------------------------------------------------------------------------- analysis


def slope_per_min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per minute; None under 5 points."""
    if len(points) < 5:
        return None
    ts = [p[0] for p in points]
    vs = [p[1] for p in points]
    mt, mv = statistics.fmean(ts), statistics.fmean(vs)
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return None
    return 60 * sum((t - mt) * (v - mv) for t, v in zip(ts, vs, strict=True)) / var


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def analyse_processes(samples: list[Sample], duration_s: float) -> dict[str, Any]:
    """Per process: RSS start/end/max and its slope over the second half of the run,
    counting a process only from min(60 s, a quarter of the run) after it was first seen
    (a restarted worker's warm-up is not a leak), and only when that leaves at least
    min(120 s, a quarter of the run) of samples."""
    series: dict[int, list[tuple[float, float, int | None]]] = {}
    roles: dict[int, str] = {}
    for s in samples:
        for pid, (role, rss, fds) in s.procs.items():
            if rss is not None:
                series.setdefault(pid, []).append((s.t, rss / 1024, fds))
                roles[pid] = role
    warm = min(60.0, duration_s / 4)
    # A slope over a few samples is noise (a restarted worker seen for 30 s of the
    # second half): judge only a process seen for long enough of it.
    least_span = min(120.0, duration_s / 4)
    out: dict[str, Any] = {}
    for pid, points in series.items():
        first = points[0][0]
        judged = [(t, mb) for t, mb, _ in points if t >= duration_s / 2 and t >= first + warm]
        long_enough = judged and judged[-1][0] - judged[0][0] >= least_span
        slope = slope_per_min(judged) if long_enough else None
        out[f"{roles[pid]} {pid}"] = {
            "pid": pid,
            "role": roles[pid],
            "seen_s": [round(first, 1), round(points[-1][0], 1)],
            "rss_mb_first": round(points[0][1], 1),
            "rss_mb_last": round(points[-1][1], 1),
            "rss_mb_max": round(max(mb for _, mb, _ in points), 1),
            "rss_slope_mb_per_min": None if slope is None else round(slope, 3),
            "slope_points": len(judged),
            "fds_first": points[0][2],
            "fds_last": points[-1][2],
            "rss_mb_series": [[round(t, 1), round(mb, 2)] for t, mb, _ in points],
        }
    return out


#: A probe this long after a fault ended still counts as during it: readiness that
#: checks the upstream notices it is back on its next check, not at once.
FAULT_GRACE_S = 10.0


def fault_at(t: float, faults: list[dict[str, Any]]) -> str | None:
    """The fault (other than a reload) in progress at ``t``, or ended < FAULT_GRACE_S ago."""
    for f in faults:
        if f["fault"] != "reload" and f["t"] <= t <= f["t"] + f["took_s"] + FAULT_GRACE_S:
            return str(f["fault"])
    return None


def analyse_liveness(samples: list[Sample], faults: list[dict[str, Any]]) -> dict[str, Any]:
    """Per endpoint: probes answered 200, answered otherwise, unanswered, latency; each
    probe that was not a 200, with the fault it fell in (None: no fault explains it)."""
    out: dict[str, Any] = {}
    for path, pick in (("/healthz", lambda s: s.health), ("/readyz", lambda s: s.ready)):
        answers = [(s.t, *pick(s)) for s in samples]
        ok = [a for a in answers if a[1] == 200]
        latencies = [a[2] * 1000 for a in answers if a[1] is not None]
        not_ok = [
            {"t": round(t, 1), "status": st, "ms": round(sec * 1000), "body": body[:160],
             "during": fault_at(t, faults)}
            for t, st, sec, body in answers
            if st != 200
        ]  # fmt: skip
        out[path] = {
            "probes": len(answers),
            "ok_200": len(ok),
            "answered_not_200": sum(1 for a in answers if a[1] not in (None, 200)),
            "unanswered": sum(1 for a in answers if a[1] is None),
            "not_ok_outside_faults": sum(1 for n in not_ok if n["during"] is None),
            "latency_ms_p50": round(percentile(latencies, 0.5), 1) if latencies else None,
            "latency_ms_p99": round(percentile(latencies, 0.99), 1) if latencies else None,
            "latency_ms_max": round(max(latencies), 1) if latencies else None,
            "not_ok": not_ok,
        }
    return out


def tracebacks(log_text: str) -> dict[str, Any]:
    """Every traceback in the gateway's log: in a JSON line's "exception" (escaped
    newlines) or printed raw on stderr (a crash outside the logger)."""
    lines = [line for line in log_text.splitlines() if TRACEBACK in line]
    return {"count": len(lines), "examples": [line[:1500] for line in lines[:3]]}


def records(ledger: Ledger) -> dict[str, Any]:
    with ledger.lock:
        acked = {seq for seq, a in enumerate(ledger.acked) if a}
        consumed = {seq for seq, c in enumerate(ledger.consumed) if c}
        in_log_twice = sum(1 for c in ledger.consumed if c > 1)
    lost = sorted(acked - consumed)
    return {
        "sent": ledger.sent,
        "acked": len(acked),
        "produce_failed": ledger.produce_failed,
        "produce_errors": ledger.produce_errors,
        "producer_fatal": ledger.producer_fatal,
        "consumed_distinct": len(consumed),
        "consumed_not_acked": len(consumed - acked),
        "lost": len(lost),
        "lost_examples": lost[:20],
        # The same sequence number at two offsets: the idempotent producer wrote it twice.
        "duplicates_in_log": in_log_twice,
        # The same offset read twice (a rebalance or restart re-read uncommitted offsets).
        "redelivered": ledger.redelivered,
        "reads": ledger.reads,
        "foreign_values": ledger.foreign,
        "consumer_errors": ledger.consumer_errors,
    }


def verdict(report: dict[str, Any], max_slope: float) -> list[str]:
    """Why the run fails (empty: it passed): a lost acked record, a traceback, client
    connections or queued bytes still counted once every client is gone, or a process
    whose RSS grew faster than ``max_slope`` MB/min."""
    failures = []
    if report["records"]["lost"]:
        failures.append(f"{report['records']['lost']} acked records never consumed")
    if report["tracebacks"]["count"]:
        failures.append(f"{report['tracebacks']['count']} tracebacks in the gateway log")
    for name, gauge in report.get("gauges", {}).items():
        # Every client is gone by the idle end: what is still counted was not released.
        if gauge["idle_end"]:
            failures.append(f"{name} is {gauge['idle_end']:g} with no client left")
    for name, proc in report["processes"].items():
        slope = proc["rss_slope_mb_per_min"]
        if slope is not None and slope > max_slope:
            failures.append(f"{name}: RSS slope {slope:.2f} MB/min > {max_slope} MB/min")
    return failures


def gateway_counters(gw: GatewayProcess) -> dict[str, Any]:
    """The gateway's own counts of what it closed, restarted and reloaded."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = (
        "kafka_gateway_connections_closed_total",
        "kafka_gateway_connections_refused_total",
        "kafka_gateway_rejected_requests_total",
        "kafka_gateway_worker_restarts_total",
        "kafka_gateway_config_reloads_total",
        "kafka_gateway_connections_total",
    )
    try:
        text = urllib.request.urlopen(gw.metrics_url, timeout=10).read().decode()
    except OSError as exc:
        return {"error": str(exc)}
    out: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in wanted:
                labels = s.labels
                if s.name == "kafka_gateway_rejected_requests_total":
                    labels = {"reason": labels["reason"]}  # summed over API and client
                key = s.name + (
                    "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"
                    if labels
                    else ""
                )
                out[key] = out.get(key, 0) + s.value
    return out


# --------------------------------------------------------------------------- the run


def create_topics(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    topics = [NewTopic(TOPIC, PARTITIONS, 1), NewTopic(CHURN_TOPIC, 1, 1)]
    for future in admin.create_topics(topics, request_timeout=15).values():
        future.result(timeout=30)


def start_parts(
    workdir: Path, broker_kind: str, workers: int
) -> tuple[ZooKeeperProcess, Broker, GatewayProcess]:
    zk = ZooKeeperProcess(workdir / "zookeeper").start()
    broker: Broker
    if broker_kind == "kafka":
        broker = ApacheKafkaBroker(workdir).start()
    else:
        broker = TansuBroker(workdir).start()
    config = workdir / "gateway.toml"
    config.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in LIMITS.items()))
    gw = GatewayProcess(
        workdir,
        broker.bootstrap,
        extra_args=[
            "--workers",
            str(workers),
            "--config",
            str(config),
            "--zookeeper",
            zk.connect_string,
            "--log-format",
            "json",
        ],
        metrics=True,
    )
    gw.start()
    base = gw.metrics_url.removesuffix("/metrics")
    deadline = time.monotonic() + 60
    while http_get(base + "/readyz", 2)[0] != 200:
        if time.monotonic() > deadline:
            raise HarnessError(f"gateway not ready after 60 s\n{gw.log_tail()}")
        time.sleep(0.2)
    return zk, broker, gw


def soak(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    began = time.monotonic()
    zk, broker, gw = start_parts(workdir, args.broker, args.workers)
    parts: list[ManagedProcess] = [gw, broker, zk]
    try:
        create_topics(gw.bootstrap)
        setup_s = time.monotonic() - began
        report = drive(args, workdir, zk, broker, gw)
    finally:
        stopping = time.monotonic()
        for part in parts:
            with contextlib.suppress(Exception):
                part.stop()
    report["wall_s"] = {"setup": round(setup_s, 1), "stop": round(time.monotonic() - stopping, 1),
                        "total": round(time.monotonic() - began, 1)}  # fmt: skip
    return report


def drive(
    args: argparse.Namespace,
    workdir: Path,
    zk: ZooKeeperProcess,
    broker: Broker,
    gw: GatewayProcess,
) -> dict[str, Any]:
    logger = client_logger(workdir / "clients.log")
    ledger, churn = Ledger(), Churn()
    attacks = [a for a in ATTACKS if a.name in args.attacks.split(",")]
    attack_stats = {a.name: AttackStats() for a in attacks}
    samples: list[Sample] = []
    stop_load, stop_consumer, stop_sampler = threading.Event(), threading.Event(), threading.Event()
    t0 = time.monotonic()
    # fds with no client at all: the baseline the end is compared with.
    idle_start = take_sample(gw, t0, 5.0)

    def thread(target: Callable[..., None], *targs: Any) -> threading.Thread:
        th = threading.Thread(target=target, args=targs, daemon=True, name=target.__name__)
        th.start()
        return th

    t0 = time.monotonic()
    sampler = thread(sampler_loop, gw, t0, args.sample_every, samples, stop_sampler)
    consumer = thread(consumer_loop, gw.bootstrap, ledger, stop_consumer, logger)
    load = [
        thread(producer_loop, gw.bootstrap, args.rate, ledger, stop_load, logger),
        thread(kafka_python_churn, gw.bootstrap, churn, stop_load),
        thread(aiokafka_churn, gw.bootstrap, churn, stop_load),
        thread(attackers_loop, attacks, t0, gw.host, gw.port, LIMITS, attack_stats, stop_load),
    ]
    faults: list[dict[str, Any]] = []
    for at, name in schedule(args.duration, args.reload_every, args.fault_cycle):
        time.sleep(max(0.0, t0 + at - time.monotonic()))
        began = time.monotonic()
        try:
            what, error = run_fault(name, gw, zk, broker, args.broker), None
        except Exception as exc:  # a fault that could not be done is a finding
            what, error = "failed", f"{type(exc).__name__}: {exc}"
        faults.append(
            {
                "t": round(began - t0, 1),
                "fault": name,
                "what": what,
                "error": error,
                "took_s": round(time.monotonic() - began, 1),
            }
        )
        print(f"  {began - t0:6.1f}s  {name}: {error or what}", flush=True)
    time.sleep(max(0.0, t0 + args.duration - time.monotonic()))
    load_end = time.monotonic() - t0
    stop_load.set()
    for th in load:
        th.join(90)
    # The consumer reads on until every acked record is in, or the drain runs out.
    drain_end = time.monotonic() + args.drain_timeout
    while ledger.missing() and time.monotonic() < drain_end:
        time.sleep(0.5)
    stop_consumer.set()
    consumer.join(30)
    stop_sampler.set()
    sampler.join(10)
    # Every client is gone: once the gateway counts no connection (or the idle limit has
    # passed, and a connection it still counts is a leak), count fds again, a second
    # later, when the upstream sides have closed too.
    settle_end = time.monotonic() + LIMITS["connections_max_idle_ms"] / 1000 + 2
    while time.monotonic() < settle_end:
        if take_sample(gw, t0, 5.0).connections_active == 0:
            break
        time.sleep(0.5)
    time.sleep(1.0)
    idle_end = take_sample(gw, t0, 5.0)

    report: dict[str, Any] = {
        "broker": args.broker,
        "workers": args.workers,
        "duration_s": args.duration,
        "load_ran_s": round(load_end, 1),
        "rate_per_s": args.rate,
        "limits": LIMITS,
        "max_rss_slope_mb_per_min": args.max_rss_slope,
        "records": records(ledger),
        "processes": analyse_processes(samples, args.duration),
        "fds": {
            "start": sum(f or 0 for _, _, f in idle_start.procs.values()),
            "end": sum(f or 0 for _, _, f in idle_end.procs.values()),
            "start_per_process": {f"{r} {p}": f for p, (r, _, f) in idle_start.procs.items()},
            "end_per_process": {f"{r} {p}": f for p, (r, _, f) in idle_end.procs.items()},
        },
        "gauges": {
            name: {
                "idle_start": getattr(idle_start, name),
                "max": max(
                    (v for x in samples if (v := getattr(x, name)) is not None), default=None
                ),
                "idle_end": getattr(idle_end, name),
            }
            for name in ("connections_active", "queued_bytes")
        },
        "liveness": analyse_liveness(samples, faults),
        "tracebacks": tracebacks(gw.log_text()),
        "faults": faults,
        "churn": {"attempts": churn.attempts, "ok": churn.ok, "failed": churn.failed},
        "attackers": {name: st.summary(faults) for name, st in attack_stats.items()},
        "gateway_counters": gateway_counters(gw),
        "samples": len(samples),
        "logs": str(workdir),
    }
    report["verdict"] = verdict(report, args.max_rss_slope)
    return report


def print_table(report: dict[str, Any]) -> None:
    r = report["records"]
    print(
        f"\nsoak: {report['broker']} broker, {report['workers']} workers, "
        f"{report['load_ran_s']:.0f} s of load, {report['samples']} samples"
    )
    print(f"{'process':<26}{'RSS first':>10}{'last':>8}{'max':>8}{'slope MB/min':>14}{'fds':>10}")
    for name, p in report["processes"].items():
        slope = p["rss_slope_mb_per_min"]
        print(
            f"{name:<26}{p['rss_mb_first']:>10.1f}{p['rss_mb_last']:>8.1f}{p['rss_mb_max']:>8.1f}"
            f"{'-' if slope is None else f'{slope:+.2f}':>14}"
            f"{str(p['fds_first']) + '→' + str(p['fds_last']):>10}"
        )
    fds, gauges = report["fds"], report["gauges"]
    print(f"fds, all gateway processes, idle: start {fds['start']}, end {fds['end']}")
    for name, g in gauges.items():
        print(f"{name}: idle start {g['idle_start']}, max {g['max']}, idle end {g['idle_end']}")
    print(
        f"records: sent {r['sent']}, acked {r['acked']}, consumed {r['consumed_distinct']}, "
        f"lost {r['lost']}, duplicates in log {r['duplicates_in_log']}, "
        f"redelivered {r['redelivered']}, produce failed {r['produce_failed']}"
    )
    for path, live in report["liveness"].items():
        print(
            f"{path}: {live['ok_200']}/{live['probes']} answered 200, "
            f"{live['answered_not_200']} other ({live['not_ok_outside_faults']} outside a "
            f"fault), {live['unanswered']} unanswered; "
            f"p50 {live['latency_ms_p50']} ms, p99 {live['latency_ms_p99']} ms, "
            f"max {live['latency_ms_max']} ms"
        )
    print(f"tracebacks in the gateway log: {report['tracebacks']['count']}")
    churn = report["churn"]
    print(
        f"churn: ok {sum(churn['ok'].values())} of {sum(churn['attempts'].values())}; "
        f"failed {churn['failed'] or 0}"
    )
    for name, a in report["attackers"].items():
        print(
            f"attack {name:<20} opened {a['opened']:>5}  cut {a['cut']:>5}  late {a['late']}"
            f"  never {a['never']}  refused {a['refused']}  early (fault/other) "
            f"{a['closed_early']['during_a_fault']}/{a['closed_early']['otherwise']}"
            f"  p50 {a.get('cut_after_s_p50', '-')} s"
        )
    done = ", ".join(
        f"{f['fault']}@{f['t']:.0f}s" for f in report["faults"] if f["fault"] != "reload"
    )
    reloads = sum(1 for f in report["faults"] if f["fault"] == "reload")
    print(f"faults: {reloads} reloads; {done}")
    print(f"wall clock, s: {report['wall_s']}")
    print(
        "verdict: " + ("PASS" if not report["verdict"] else "FAIL: " + "; ".join(report["verdict"]))
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--duration", type=float, default=600, help="seconds of load [600]")
    p.add_argument(
        "--broker",
        choices=("kafka", "tansu"),
        default="kafka",
        help="Apache Kafka 4.4 (KRaft; keeps its data across the restart) or "
        "Tansu (memory storage: its restart is skipped) [kafka]",
    )
    p.add_argument("--workers", type=int, default=2, help="gateway workers [2]")
    p.add_argument("--rate", type=float, default=200, help="records/s produced [200]")
    p.add_argument("--sample-every", type=float, default=5, help="sampling period, s [5]")
    p.add_argument("--reload-every", type=float, default=30, help="SIGHUP period, s [30]")
    p.add_argument(
        "--fault-cycle",
        type=float,
        default=300,
        help="a worker kill, a ZooKeeper and a broker restart every this many s (0: none) [300]",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=60,
        help="after the load, how long the consumer may take to catch up [60]",
    )
    p.add_argument(
        "--max-rss-slope",
        type=float,
        default=1.0,
        help="fail when a process's RSS grows faster than this, MB/min, over the second half [1.0]",
    )
    p.add_argument(
        "--attacks",
        default=",".join(a.name for a in ATTACKS),
        help="the attackers to run, comma-separated [all: %(default)s]",
    )
    p.add_argument("--out", type=Path, help="write the JSON report here")
    p.add_argument("--workdir", type=Path, help="logs and data here [a temporary directory]")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (a CI timeout, kill) unwinds as Ctrl-C does, so the parts are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"soak: {args.duration:.0f} s against {args.broker}; logs in {workdir}", flush=True)
    try:
        report = soak(args, workdir)
    except HarnessError as exc:
        print(f"soak: could not start the parts: {exc}", file=sys.stderr)
        return 2
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print_table(report)
    return 1 if report["verdict"] else 0


if __name__ == "__main__":
    sys.exit(main())
