"""CPU per request of one proxied connection's data path, in-process: no sockets, no broker.

On a small shared machine the socket benchmarks (``bench.py``, ``metadata_bench.py``)
swing by 2-3x between runs with the neighbours' load; this one measures only the
gateway's own Python per request, which is what a change to the hot path moves, and
repeats within a few percent. A real ``Gateway`` and ``ClientConnection`` are built
from the default config; the two transports are stand-ins that only count bytes (the
point is to leave the kernel and the event loop out). Each case hands one read of
request frames to the connection and one read of their responses to its upstream side,
as a socket read does (copied into the shared receive buffer, then ``buffer_updated``:
the compiled lane where it takes the read, else the Python path; set
``KAFKA_GATEWAY_PURE_PYTHON=1`` for the Python path alone), ``--requests`` times,
``--repeat`` times, and prints the best CPU (``time.process_time``) per request:

* a forwarded request (DescribeGroups: no interceptor asks for it either way);
* the same, pipelined: 16 requests arrive in one read and their 16 responses in one
  (what a client with requests in flight and a busy socket produce), per request;
* Metadata, whose broker addresses the gateway rewrites (only its head is held back);
* Produce v9 (acks=1), forwarded, and Produce v11, whose response the gateway walks to
  its top-level tagged section for KIP-951's NodeEndpoints: what every produce of a
  current client costs (Produce v10+), one a read and 8 a read;
* Fetch v16 with 1 KiB of records, walked the same way: a consumer that keeps up.

``--profile`` prints where the time goes (cProfile, top functions by own time).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import responder

from gateway.config import load_config
from gateway.features.report import NO_FEATURES
from gateway.protocol import SCANNER_COMPILED
from gateway.server import proxy
from gateway.server.app import Gateway
from gateway.server.proxy import ClientConnection, UpstreamConnection
from gateway.versions import gateway_supported


class CountingTransport:
    """Takes what the connection writes and keeps only its length."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes | memoryview) -> None:
        self.written += len(data)

    def writelines(self, frames: list[bytes]) -> None:
        for data in frames:
            self.written += len(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def connection() -> ClientConnection:
    """A connection past negotiation, to an upstream that offers every version."""
    cfg = load_config(None, {"upstream": "127.0.0.1:9092", "listen": "127.0.0.1:0"})
    conn = ClientConnection(Gateway(cfg), "sidecar", cfg.upstream)  # type: ignore[arg-type]
    conn._client_made(CountingTransport())  # type: ignore[arg-type]
    conn.upstream_made(CountingTransport())  # type: ignore[arg-type]
    conn.negotiated(gateway_supported(), NO_FEATURES)
    # What is loaded by now out of the collector's sight, as the gateway does once started
    # (app.py): otherwise its full collections walk the imports' ~70k objects, a cost
    # that grows with every module the gateway gains and that the gateway does not pay.
    gc.collect()
    gc.freeze()
    return conn


PIPELINED = 16
# A producer's requests in flight per connection: librdkafka's and the Java client's
# max.in.flight.requests.per.connection is 5; 8 keeps a read's worth together.
PIPELINED_PRODUCE = 8


def cases(partitions: int) -> dict[str, tuple[bytes, bytes, int]]:
    """name → (request bytes, response bytes, requests they carry)."""
    request = responder.describe_groups_request(0)
    produce = responder.produce_request(11)
    ids = range(PIPELINED)
    return {
        "forwarded (DescribeGroups v0)": (
            request,
            responder.canned_response(responder.DESCRIBE_GROUPS, 0),
            1,
        ),
        f"forwarded, {PIPELINED} per read": (
            b"".join(responder.with_correlation_id(request, i) for i in ids),
            b"".join(responder.canned_response(responder.DESCRIBE_GROUPS, 0, i) for i in ids),
            PIPELINED,
        ),
        f"Metadata v12, {partitions} partitions (rewritten)": (
            responder.metadata_request(12),
            responder.canned_response(responder.METADATA, 12, partitions=partitions),
            1,
        ),
        "Produce v9 acks=1 (forwarded)": (
            responder.produce_request(9),
            responder.canned_response(responder.PRODUCE, 9),
            1,
        ),
        "Produce v11 acks=1 (tags walked)": (
            responder.produce_request(11),
            responder.canned_response(responder.PRODUCE, 11),
            1,
        ),
        f"Produce v11, {PIPELINED_PRODUCE} per read": (
            b"".join(responder.with_correlation_id(produce, i) for i in range(PIPELINED_PRODUCE)),
            b"".join(
                responder.canned_response(responder.PRODUCE, 11, i)
                for i in range(PIPELINED_PRODUCE)
            ),
            PIPELINED_PRODUCE,
        ),
        f"Fetch v16, {responder.FETCH_RECORD_BYTES} B records (tags walked)": (
            responder.fetch_request(16),
            responder.canned_response(responder.FETCH, 16),
            1,
        ),
    }


def measure(conn: ClientConnection, request: bytes, response: bytes, per: int, n: int) -> float:
    """CPU seconds per request through the connection (``per`` requests a feed)."""
    recv, upstream = proxy._RECV, UpstreamConnection(conn)
    # Taken once, as uvloop takes a protocol's buffer_updated when its transport is made.
    client_read, upstream_read = conn.buffer_updated, upstream.buffer_updated
    asked, answered = len(request), len(response)
    gc.collect()
    start = time.process_time()
    for _ in range(n):
        recv[:asked] = request
        client_read(asked)
        recv[:answered] = response
        upstream_read(answered)
    elapsed = time.process_time() - start
    assert conn.in_flight() == 0, "a response was not matched to its request"
    return elapsed / (n * per)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000, help="per repeat")
    parser.add_argument("--repeat", type=int, default=5, help="the best repeat counts")
    parser.add_argument("--partitions", type=int, default=10, help="in the Metadata response")
    parser.add_argument("--profile", action="store_true", help="cProfile each case")
    args = parser.parse_args(argv)
    # Inside a running loop, as in the gateway (the connection schedules work on it).
    return asyncio.run(_main(args))


async def _main(args: argparse.Namespace) -> int:
    conn = connection()
    print("scanner:", "compiled" if SCANNER_COMPILED else "plain Python")
    for name, (request, response, per) in cases(args.partitions).items():
        n = max(args.requests // per, 1)
        measure(conn, request, response, per, min(n, 2000))  # warm up
        best = min(measure(conn, request, response, per, n) for _ in range(args.repeat))
        print(f"{name:<40} {best * 1e6:8.2f} µs CPU per request")
        if args.profile:
            profiler = cProfile.Profile()
            profiler.runcall(measure, conn, request, response, per, n)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
