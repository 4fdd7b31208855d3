"""Throw malformed and mutated Kafka frames at a live gateway; report what it did.

Starts ZooKeeper, a Tansu broker (``--broker kafka``: Apache Kafka 4.4, in front of
which the version bridge converts the versions Kafka 4 removed) and a gateway (feature
gating on, so UpdateFeatures is intercepted too), then keeps ``--connections``
connections busy until ``--frames`` frames are thrown or ``--duration`` seconds pass.
Each connection writes a batch of frames and then a probe (a valid ApiVersions request)
and reads until the probe's answer or the gateway closes the connection; no answer
within ``--hang-s`` is a hang.

Frames: random bytes, truncated frames, bad lengths (negative, zero, oversize), bad
headers (unknown keys, versions beyond every schema, bad client_id lengths), bad varints
and tagged fields in flexible headers and bodies, huge array lengths, and valid requests
(ApiVersions, Metadata, Produce, UpdateFeatures, DescribeCluster, SaslHandshake, and
the bridged Produce v2 with a message set, Fetch v2, ListOffsets v0, OffsetCommit v1,
OffsetFetch v0) with bytes flipped, cut or inserted.

Report (JSON on stdout, a summary on stderr): frames and bytes thrown, connections,
connections the gateway closed, hangs, whether the gateway crashed (exited), tracebacks
and error lines in its log, and its RSS before and after (``/proc/PID/status``).

    python bench/fuzz_gateway.py --frames 1000000 --duration 600
    python bench/fuzz_gateway.py --broker kafka --frames 100000 --duration 300
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.bridge.messages import encode
from gateway.wire import frame as framed
from gateway.wire import request_header
from gateway.wire import write_uvarint as uvarint
from tests.harness import GatewayProcess, TansuBroker, ZooKeeperProcess
from tests.harness.apache_kafka import ApacheKafkaBroker

PROBE_ID = 0x7EADBEEF
MAX_FRAME = 1 << 20  # the gateway runs with this max_frame_bytes


def cstr(value: str) -> bytes:
    raw = value.encode()
    return uvarint(len(raw) + 1) + raw


def header(key: int, version: int, cid: int, flexible: bool, client_id: str = "fuzz") -> bytes:
    """Request header v2 (flexible) or v1, whatever the key and version say."""
    return request_header(key, version, cid, client_id, 2 if flexible else 1)


# Valid requests: the seeds of the mutations (bodies written by hand, Kafka's layouts).
def seeds(rng: random.Random) -> list[bytes]:
    cid = rng.randrange(0, 1000)  # reused ids, as the attacker did
    api_v3 = cstr("fuzz-client") + cstr("1.0") + b"\x00"
    metadata_v12 = b"\x01" + b"\x00" + b"\x00" + b"\x00"  # null topics, 2 bools, tags
    update_features_v1 = (
        struct.pack(">i", 30000)
        + uvarint(2)
        + cstr("group.version")
        + struct.pack(">h", 1)
        + b"\x01"
        + b"\x00"
        + b"\x00"
        + b"\x00"
    )
    describe_cluster_v1 = b"\x00\x01\x00"
    produce_v7 = (
        b"\xff\xff"
        + struct.pack(">hi", 1, 1000)
        + struct.pack(">i", 1)
        + struct.pack(">h", 4)
        + b"fuzz"
        + struct.pack(">i", 1)
        + struct.pack(">ii", 0, 8)
        + b"\x00" * 8
    )
    sasl_v1 = struct.pack(">h", 5) + b"PLAIN"
    return [
        *bridged_seeds(cid),
        framed(header(18, 3, cid, True) + api_v3),
        framed(header(18, 0, cid, False)),
        framed(header(3, 12, cid, True) + metadata_v12),
        framed(header(57, 1, cid, True) + update_features_v1),
        framed(header(60, 1, cid, True) + describe_cluster_v1),
        framed(header(0, 7, cid, False) + produce_v7),
        framed(header(17, 1, cid, False) + sasl_v1),
    ]


def bridged_seeds(cid: int) -> list[bytes]:
    """Requests at versions Kafka 4 removed, which the version bridge converts (bodies
    from Kafka's specs, ``gateway.bridge.messages``): a Produce v2 with a magic 1 message
    set (two messages, the second with a null key), Fetch v2, ListOffsets v0,
    OffsetCommit v1, OffsetFetch v0."""
    message_set = b""
    for offset, (key, value) in enumerate(((b"k", b"v"), (None, b"value"))):
        body = struct.pack(">bbq", 1, 0, 1_700_000_000_000)
        body += struct.pack(">i", -1) if key is None else struct.pack(">i", len(key)) + key
        body += struct.pack(">i", len(value)) + value
        crc = zlib.crc32(body)
        message_set += struct.pack(">qiI", offset, len(body) + 4, crc) + body
    topic = [{"Name": "fuzz", "Partitions": [{"PartitionIndex": 0}]}]
    bodies = [
        (
            0,
            2,
            {
                "Acks": 1,
                "TimeoutMs": 1000,
                "TopicData": [
                    {"Name": "fuzz", "PartitionData": [{"Index": 0, "Records": message_set}]}
                ],
            },
        ),
        (
            1,
            2,
            {
                "ReplicaId": -1,
                "MaxWaitMs": 10,
                "MinBytes": 1,
                "Topics": [
                    {
                        "Topic": "fuzz",
                        "Partitions": [
                            {"Partition": 0, "FetchOffset": 0, "PartitionMaxBytes": 65536}
                        ],
                    }
                ],
            },
        ),
        (
            2,
            0,
            {
                "ReplicaId": -1,
                "Topics": [
                    {
                        "Name": "fuzz",
                        "Partitions": [{"PartitionIndex": 0, "Timestamp": -1, "MaxNumOffsets": 1}],
                    }
                ],
            },
        ),
        (
            8,
            1,
            {
                "GroupId": "fuzz",
                "GenerationIdOrMemberEpoch": -1,
                "MemberId": "",
                "Topics": [
                    {
                        "Name": "fuzz",
                        "Partitions": [
                            {"PartitionIndex": 0, "CommittedOffset": 1, "CommitTimestamp": -1}
                        ],
                    }
                ],
            },
        ),
        (9, 0, {"GroupId": "fuzz", "Topics": topic}),
    ]
    names = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 8: "OffsetCommit", 9: "OffsetFetch"}
    return [
        framed(header(key, version, cid, False) + encode(f"{names[key]}Request", version, body))
        for key, version, body in bodies
    ]


# Length prefix, key, version, correlation id, client_id "fuzz": mutations past this
# keep the request's identity and exercise what parses its body.
HEADER_END = 4 + 8 + 2 + 4


def mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    # Mostly the body (the gateway then decodes it, or forwards it); sometimes anywhere.
    start = HEADER_END if rng.random() < 0.8 and len(data) > HEADER_END else 4
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(start, len(data)) if len(data) > start else start
        kind = rng.randrange(5)
        if kind == 0 and pos < len(data):
            data[pos] ^= rng.randrange(1, 256)
        elif kind == 1:
            del data[pos : pos + rng.randint(1, 8)]
        elif kind == 2:
            data[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif kind == 3:  # a varint that runs on
            data[pos:pos] = b"\xff" * rng.randint(1, 10)
        else:  # an int32 array length of 2**31-1
            data[pos:pos] = b"\x7f\xff\xff\xff"
    # Keep the frame's own length right unless the mutation is about lengths: the
    # point is what is inside it.
    return framed(bytes(data[4:]))


class Kind:
    """Generators; ``fatal`` ones make the gateway close the connection."""

    @staticmethod
    def random_bytes(rng: random.Random) -> tuple[bytes, bool]:
        if rng.random() < 0.5:  # behind a known key and version: the body is garbage
            key, version, flexible = rng.choice([(18, 3, True), (57, 1, True), (60, 0, True)])
            head = header(key, version, rng.randrange(1000), flexible)
            return framed(head + rng.randbytes(rng.randint(0, 300))), False
        return framed(rng.randbytes(rng.randint(8, 300))), False

    @staticmethod
    def mutated(rng: random.Random) -> tuple[bytes, bool]:
        return mutate(rng, rng.choice(seeds(rng))), False

    @staticmethod
    def bad_length(rng: random.Random) -> tuple[bytes, bool]:
        size = rng.choice([-1, -(2**31), 0, 3, MAX_FRAME + 1, 2**31 - 1])
        return struct.pack(">i", size) + rng.randbytes(16), True

    @staticmethod
    def bad_header(rng: random.Random) -> tuple[bytes, bool]:
        choice = rng.randrange(4)
        cid = rng.randrange(1000)
        if choice == 0:  # unknown api key
            return framed(header(rng.choice([-1, 999, 32767]), 0, cid, False)), True
        if choice == 1:  # version beyond every schema
            return framed(header(3, rng.choice([99, 32767, -1]), cid, True)), True
        if choice == 2:  # client_id longer than the frame
            return framed(struct.pack(">hhih", 3, 1, cid, 30000) + b"ab"), True
        # flexible header whose tagged section's varint never ends
        return framed(header(18, 3, cid, True)[:-1] + b"\xff" * 6), True

    @staticmethod
    def bad_tags(rng: random.Random) -> tuple[bytes, bool]:
        # An intercepted request (ApiVersions v3) with a broken tagged section in its body.
        body = cstr("fuzz") + cstr("1") + rng.choice([b"\x05\x01", b"\x01\xff\xff\xff\xff\x7f"])
        return framed(header(18, 3, rng.randrange(1000), True) + body), False

    @staticmethod
    def huge_array(rng: random.Random) -> tuple[bytes, bool]:
        key, version, flexible = rng.choice([(57, 1, True), (60, 0, True), (3, 9, True)])
        body = struct.pack(">i", 1000) + uvarint(2**31 - 1) if key == 57 else uvarint(2**31 - 1)
        return framed(header(key, version, rng.randrange(1000), flexible) + body), False


# Weights: most frames are ones the gateway itself must parse and survive (a broker
# closes on garbage forwarded to it, which ends the connection early).
GENERATORS = [
    (Kind.mutated, 40),
    (Kind.bad_tags, 20),
    (Kind.huge_array, 15),
    (Kind.random_bytes, 10),
    (Kind.bad_header, 3),
    (Kind.bad_length, 2),
]


def batch(rng: random.Random, size: int) -> tuple[list[bytes], bool]:
    """Frames for one connection, and whether a probe may follow them (no frame that
    leaves the gateway waiting for the rest of a frame)."""
    functions, weights = zip(*GENERATORS, strict=True)
    frames: list[bytes] = []
    for _ in range(size):
        frame, fatal = rng.choices(functions, weights)[0](rng)
        frames.append(frame)
        if fatal:
            break
    if rng.random() < 0.05:  # truncated: the connection ends mid-frame
        cut = rng.choice(seeds(rng))
        frames.append(cut[: rng.randrange(1, len(cut))])
        return frames, False
    return frames, True


class Stats:
    def __init__(self) -> None:
        self.frames = 0
        self.bytes = 0
        self.connections = 0
        self.closed_by_gateway = 0
        self.probes_answered = 0
        self.hangs = 0
        self.connect_errors = 0
        self.rss_mib: list[float] = []


async def connection(
    host: str, port: int, rng: random.Random, stats: Stats, hang_s: float, size: int
) -> None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
    except (OSError, TimeoutError):
        stats.connect_errors += 1
        return
    stats.connections += 1
    frames, probe = batch(rng, size)
    data = b"".join(frames)
    if probe:
        data += framed(header(18, 0, PROBE_ID, False))
    stats.frames += len(frames)
    stats.bytes += len(data)
    try:
        writer.write(data)
        await writer.drain()
        if probe and not await wait_for_probe(reader, hang_s):
            stats.hangs += 1
        elif probe:
            stats.probes_answered += 1
    except (ConnectionError, _Closed):
        stats.closed_by_gateway += 1
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


class _Closed(Exception):
    pass


async def wait_for_probe(reader: asyncio.StreamReader, hang_s: float) -> bool:
    """True once the probe is answered; _Closed when the gateway closes; False on a hang."""
    deadline = time.monotonic() + hang_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            head = await asyncio.wait_for(reader.readexactly(8), left)
            size, cid = struct.unpack(">ii", head)
            await asyncio.wait_for(reader.readexactly(size - 4), left)
        except asyncio.IncompleteReadError:
            raise _Closed from None
        except TimeoutError:
            return False
        if cid == PROBE_ID:
            return True


async def run(
    args: argparse.Namespace, host: str, port: int, stats: Stats, pid: int | None = None
) -> float:
    rng = random.Random(args.seed)
    start = time.monotonic()
    deadline = start + args.duration
    pending: set[asyncio.Task[None]] = set()
    next_sample = 0
    while stats.frames < args.frames and time.monotonic() < deadline:
        if pid is not None and stats.frames >= next_sample:
            # RSS along the run: a leak grows with frames, a warm-up settles.
            stats.rss_mib.append(round(rss_kib(pid) / 1024, 1))
            next_sample += args.frames // 10
        while len(pending) < args.connections:
            child = random.Random(rng.getrandbits(64))
            task = asyncio.create_task(
                connection(host, port, child, stats, args.hang_s, args.batch)
            )
            pending.add(task)
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    if pending:
        await asyncio.wait(pending)
    return time.monotonic() - start


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


TRACEBACK = re.compile(r"Traceback \(most recent call last\)|Exception in callback|Fatal error")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--duration", type=float, default=600.0, help="upper bound, seconds")
    parser.add_argument("--connections", type=int, default=64, help="concurrent connections")
    parser.add_argument("--batch", type=int, default=5, help="frames per connection")
    parser.add_argument("--hang-s", type=float, default=20.0, help="probe answer deadline")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--broker", choices=("tansu", "kafka"), default="tansu", help="kafka: Apache Kafka 4.4"
    )
    args = parser.parse_args()

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fuzz-gateway-"))
    workdir.mkdir(parents=True, exist_ok=True)
    zookeeper = ZooKeeperProcess(workdir).start()
    broker: TansuBroker | ApacheKafkaBroker
    if args.broker == "kafka":  # the version bridge is engaged in front of Kafka 4
        broker = ApacheKafkaBroker(workdir / "kafka")
        broker.start()
    else:
        broker = TansuBroker(workdir).start()
    config = workdir / "fuzz.toml"
    config.write_text(f'max_frame_bytes = {MAX_FRAME}\n[log]\nformat = "json"\n')
    gateway = GatewayProcess(
        workdir,
        broker.bootstrap,
        extra_args=["--config", str(config), "--zookeeper", zookeeper.connect_string],
    ).start()
    stats = Stats()
    try:
        pid = gateway._proc.pid
        # Warm up with real traffic so "before" includes what a serving gateway holds.
        warm_up = argparse.Namespace(**{**vars(args), "frames": 2000})
        asyncio.run(run(warm_up, *_hp(gateway), Stats()))
        rss_before = rss_kib(pid)
        elapsed = asyncio.run(run(args, *_hp(gateway), stats, pid))
        time.sleep(2)  # let closed connections be torn down
        alive = gateway.running
        rss_after = rss_kib(pid) if alive else None
        log = gateway.log_text()
        tracebacks = len(TRACEBACK.findall(log))
        errors = sum(1 for line in log.splitlines() if '"level": "error"' in line)
        suppressed = sum(int(m) for m in re.findall(r'"suppressed": (\d+)', log))
    finally:
        exit_code = gateway.stop()
        broker.stop()
        zookeeper.stop()
    report = {
        "frames": stats.frames,
        "bytes": stats.bytes,
        "seconds": round(elapsed, 1),
        "frames_per_s": round(stats.frames / elapsed),
        "connections": stats.connections,
        "closed_by_gateway": stats.closed_by_gateway,
        "probes_answered": stats.probes_answered,
        "hangs": stats.hangs,
        "connect_errors": stats.connect_errors,
        "crashed": not alive,
        "exit_code_on_sigterm": exit_code,
        "tracebacks_in_log": tracebacks,
        "error_lines_in_log": errors,
        "log_lines": log.count("\n"),
        "log_lines_suppressed": suppressed,
        "rss_before_mib": round(rss_before / 1024, 1),
        "rss_after_mib": round(rss_after / 1024, 1) if rss_after is not None else None,
        "rss_every_tenth_mib": stats.rss_mib,
        "gateway_log": str(gateway.log_path),
    }
    print(json.dumps(report, indent=2))
    ok = alive and not tracebacks and not stats.hangs and exit_code == 0
    print(("OK" if ok else "PROBLEMS") + f": {stats.frames} frames", file=sys.stderr)
    return 0 if ok else 1


def _hp(gateway: GatewayProcess) -> tuple[str, int]:
    return gateway.host, gateway.port


if __name__ == "__main__":
    sys.exit(main())
