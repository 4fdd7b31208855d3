"""A minimal, multi-core Kafka responder: the synthetic upstream of the benchmarks.

It is no broker: it answers a handful of APIs with canned responses, so that the
upstream is never the bottleneck and what a benchmark measures is the path in front
of it (the gateway, haproxy). Several processes accept on one port (SO_REUSEPORT),
each an event loop that answers whole requests with pre-encoded bytes in which only
the correlation id changes.

Answered: ApiVersions v0-3, Metadata v0-12 (``partitions`` partitions in one topic,
three brokers all advertised at the responder's own address), DescribeGroups v0-5
(one empty group), FindCoordinator v0-3 (broker 0), Produce v3-11 (one partition
appended, no NodeEndpoints: what a broker answers when its leadership did not move),
Fetch v4-17 (one partition with ``FETCH_RECORD_BYTES`` of records, no NodeEndpoints).
Anything else closes the connection, as a broker does with a request it cannot parse.

Function API: ``start(partitions=..., processes=...)`` returns a ``Responder`` (port,
``stop()``, a context manager); ``metadata_request(version)``,
``describe_groups_request()``, ``produce_request(version)`` and ``fetch_request(version)``
build requests,
``canned_response(...)`` the answer;
``ceiling(port, ...)`` measures what one client gets straight from it. CLI:
``python bench/responder.py --help``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import importlib
import multiprocessing
import os
import socket
import struct
import sys
import time
import uuid
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from gateway.wire import api_spec, request_frame
from gateway.wire import encode as _encode

LOOPBACK = "127.0.0.1"
API_VERSIONS, METADATA, DESCRIBE_GROUPS, FIND_COORDINATOR, PRODUCE, FETCH = 18, 3, 15, 10, 0, 1
# api key -> (min, max) this responder answers.
SUPPORTED = {
    API_VERSIONS: (0, 4),  # v4 as Kafka 3.9+ (the gateway asks v4 first)
    METADATA: (0, 12),
    DESCRIBE_GROUPS: (0, 5),
    FIND_COORDINATOR: (0, 3),
    PRODUCE: (3, 11),
    FETCH: (4, 17),
}
# Record bytes in a Fetch answer: a consumer that keeps up gets small fetches.
FETCH_RECORD_BYTES = 1024
TOPIC = "bench-metadata"
_TOPIC_ID = uuid.UUID(int=1)
BROKERS = 3
# kio names the field throttle_time in some APIs, throttle_time_ms in others.
_NO_THROTTLE = {"throttle_time": datetime.timedelta(0), "throttle_time_ms": datetime.timedelta(0)}
_HEAD = struct.Struct(">ihhi")  # size, api key, api version, correlation id


def _schema(api: str, version: int, kind: str) -> Any:
    module = importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")
    for value in vars(module).values():
        if (
            (
                isinstance(value, type)
                and value.__module__ == module.__name__
                and hasattr(value, "__api_key__")
            )
            and getattr(value, "__type__", None) is not None
            and value.__type__.name == kind
        ):
            return value
    raise LookupError(module.__name__)


def _nested(cls: type, name: str) -> type:
    import typing

    hint = typing.get_type_hints(cls)[name]
    return typing.get_args(hint)[0]  # type: ignore[no-any-return]


def _build(cls: Any, **fields: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})


def _header_tagged(api_key: int, version: int) -> bool:
    """Response header v1 (a tagged section) for flexible versions, except ApiVersions."""
    spec = api_spec(api_key)
    assert spec is not None
    return spec.response_header_version(version) == 1


_API_NAMES = {
    API_VERSIONS: "api_versions",
    METADATA: "metadata",
    DESCRIBE_GROUPS: "describe_groups",
    FIND_COORDINATOR: "find_coordinator",
    PRODUCE: "produce",
    FETCH: "fetch",
}


def _api_versions_body(version: int) -> bytes:
    cls = _schema("api_versions", version, "response")
    key_cls = _nested(cls, "api_keys")
    keys = tuple(
        _build(key_cls, api_key=k, min_version=lo, max_version=hi)
        for k, (lo, hi) in sorted(SUPPORTED.items())
    )
    return _encode(
        _build(
            cls,
            error_code=ErrorCode.none,
            api_keys=keys,
            **_NO_THROTTLE,
        )
    )


def _metadata_body(version: int, partitions: int, port: int) -> bytes:
    import uuid

    cls = _schema("metadata", version, "response")
    broker_cls = _nested(cls, "brokers")
    topic_cls = _nested(cls, "topics")
    partition_cls = _nested(topic_cls, "partitions")
    brokers = tuple(
        _build(broker_cls, node_id=n, host=LOOPBACK, port=port, rack=None) for n in range(BROKERS)
    )
    parts = tuple(
        _build(
            partition_cls,
            error_code=ErrorCode.none,
            partition_index=i,
            leader_id=i % BROKERS,
            leader_epoch=0,
            replica_nodes=tuple((i + r) % BROKERS for r in range(BROKERS)),
            isr_nodes=tuple((i + r) % BROKERS for r in range(BROKERS)),
            offline_replicas=(),
        )
        for i in range(partitions)
    )
    topic = _build(
        topic_cls,
        error_code=ErrorCode.none,
        name=TOPIC,
        topic_id=uuid.UUID(int=19),
        is_internal=False,
        partitions=parts,
        topic_authorized_operations=-2147483648,
    )
    return _encode(
        _build(
            cls,
            **_NO_THROTTLE,
            brokers=brokers,
            cluster_id="bench",
            controller_id=0,
            topics=(topic,),
            cluster_authorized_operations=-2147483648,
        )
    )


def _describe_groups_body(version: int) -> bytes:
    cls = _schema("describe_groups", version, "response")
    group_cls = _nested(cls, "groups")
    group = _build(
        group_cls,
        error_code=ErrorCode.none,
        group_id="bench",
        group_state="Empty",
        protocol_type="consumer",
        protocol_data="",
        members=(),
        authorized_operations=-2147483648,
    )
    return _encode(
        _build(
            cls,
            **_NO_THROTTLE,
            groups=(group,),
        )
    )


def _find_coordinator_body(version: int, port: int) -> bytes:
    cls = _schema("find_coordinator", version, "response")
    return _encode(
        _build(
            cls,
            **_NO_THROTTLE,
            error_code=ErrorCode.none,
            error_message=None,
            node_id=0,
            host=LOOPBACK,
            port=port,
        )
    )


def _produce_body(version: int) -> bytes:
    cls = _schema("produce", version, "response")
    topic_cls = _nested(cls, "responses")
    partition_cls = _nested(topic_cls, "partition_responses")
    partition = _build(
        partition_cls,
        index=0,
        error_code=ErrorCode.none,
        base_offset=0,
        log_append_time=None,  # -1: the topic keeps create time
        log_start_offset=0,
        record_errors=(),
        error_message=None,
    )
    topic = _build(topic_cls, name=TOPIC, partition_responses=(partition,))
    return _encode(_build(cls, **_NO_THROTTLE, responses=(topic,)))


def _fetch_body(version: int, partitions: int = 1, records: bytes | None = None) -> bytes:
    """A Fetch answer: ``partitions`` partitions of ``records`` each (FETCH_RECORD_BYTES
    zero bytes by default)."""
    cls = _schema("fetch", version, "response")
    topic_cls = _nested(cls, "responses")
    partition_cls = _nested(topic_cls, "partitions")
    each = tuple(
        _build(
            partition_cls,
            partition_index=i,
            error_code=ErrorCode.none,
            high_watermark=100,
            last_stable_offset=100,
            log_start_offset=0,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=bytes(FETCH_RECORD_BYTES) if records is None else records,
        )
        for i in range(partitions)
    )
    # Fetch v13 names topics by id (KIP-516), older versions by name: _build keeps the one
    # this version has.
    topic = _build(topic_cls, topic=TOPIC, topic_id=_TOPIC_ID, partitions=each)
    return _encode(
        _build(cls, **_NO_THROTTLE, error_code=ErrorCode.none, session_id=0, responses=(topic,))
    )


class _Answers:
    """Pre-encoded responses per (api key, version): (bytes before the correlation id's
    end, bytes after it); built on first use (a 200k-partition Metadata takes seconds)."""

    def __init__(self, partitions: int, port: int) -> None:
        self.partitions = partitions
        self.port = port
        self._cache: dict[tuple[int, int], tuple[int, bytes]] = {}

    def get(self, key: int, version: int) -> tuple[int, bytes] | None:
        found = self._cache.get((key, version))
        if found is not None:
            return found
        lo_hi = SUPPORTED.get(key)
        if lo_hi is None or not lo_hi[0] <= version <= lo_hi[1]:
            return None
        if key == API_VERSIONS:
            body = _api_versions_body(version)
        elif key == METADATA:
            body = _metadata_body(version, self.partitions, self.port)
        elif key == DESCRIBE_GROUPS:
            body = _describe_groups_body(version)
        elif key == PRODUCE:
            body = _produce_body(version)
        elif key == FETCH:
            body = _fetch_body(version)
        else:
            body = _find_coordinator_body(version, self.port)
        rest = (b"\x00" if _header_tagged(key, version) else b"") + body
        found = (4 + len(rest), rest)  # frame size (correlation id included), the rest
        self._cache[(key, version)] = found
        return found


class _Connection(asyncio.Protocol):
    def __init__(self, answers: _Answers) -> None:
        self.answers = answers
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, end = 0, len(buf)
        out: list[bytes] = []
        while end - pos >= 12:
            size, key, version, correlation_id = _HEAD.unpack_from(buf, pos)
            if end - pos - 4 < size:
                break
            pos += 4 + size
            answer = self.answers.get(key, version)
            if answer is None:
                assert self.transport is not None
                self.transport.close()
                return
            out.append(struct.pack(">ii", answer[0], correlation_id))
            out.append(answer[1])
        del buf[:pos]
        if out and self.transport is not None:
            self.transport.writelines(out)


def _serve(sock: socket.socket, answers: _Answers) -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Connection(answers), sock=sock)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


def _reuseport_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((LOOPBACK, port))
    sock.listen(1024)
    return sock


@dataclasses.dataclass
class Responder:
    """A running responder: ``port`` and its worker processes; ``stop()`` ends them."""

    port: int
    partitions: int
    workers: list[multiprocessing.process.BaseProcess]

    def pids(self) -> list[int]:
        return [w.pid for w in self.workers if w.pid is not None]

    def stop(self) -> None:
        for worker in self.workers:
            worker.terminate()
        for worker in self.workers:
            worker.join(5)

    def __enter__(self) -> Responder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(partitions: int = 10_000, processes: int = 2, port: int = 0) -> Responder:
    """Start ``processes`` workers on one port (0: a free one) and wait until they answer."""
    first = _reuseport_socket(port)
    port = first.getsockname()[1]
    ctx = multiprocessing.get_context("fork")
    socks = [first] + [_reuseport_socket(port) for _ in range(processes - 1)]
    # Encoded before the fork, so that no worker's first answer waits for the encoding
    # (seconds at 100k partitions); other versions are encoded on first use.
    answers = _Answers(partitions, port)
    answers.get(METADATA, 1)
    workers = [ctx.Process(target=_serve, args=(s, answers), daemon=True) for s in socks]
    for worker in workers:
        worker.start()
    for sock in socks:
        sock.close()  # the workers hold their copies
    responder = Responder(port, partitions, workers)
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection((LOOPBACK, port), timeout=60) as probe:
                roundtrip(probe, metadata_request(1))  # also encodes one Metadata
            return responder
        except OSError:
            if time.monotonic() > deadline:
                responder.stop()
                raise
            time.sleep(0.05)


# ----------------------------------------------------------------------------- clients


def request(key: int, version: int, body: bytes = b"", correlation_id: int = 1) -> bytes:
    """A request frame with header v1 (client id "bench"); v2 for flexible versions."""
    return request_frame(key, version, correlation_id, body, "bench")


@cache
def metadata_request(version: int = 1) -> bytes:
    """Metadata of every topic (v0: an empty list means all; v1+: null)."""
    cls = _schema("metadata", version, "request")
    fields = {"topics": () if version == 0 else None, "allow_auto_topic_creation": False}
    fields["include_topic_authorized_operations"] = False
    fields["include_cluster_authorized_operations"] = False
    return request(METADATA, version, _encode(_build(cls, **fields)))


@cache
def describe_groups_request(version: int = 0) -> bytes:
    cls = _schema("describe_groups", version, "request")
    return request(DESCRIBE_GROUPS, version, _encode(_build(cls, groups=("bench",))))


@cache
def produce_request(version: int = 11, record_bytes: int = 100) -> bytes:
    """acks=1, one partition of ``TOPIC`` carrying ``record_bytes`` of records (opaque to
    the gateway, which reads a produce request only up to its acks)."""
    cls = _schema("produce", version, "request")
    topic_cls = _nested(cls, "topic_data")
    partition_cls = _nested(topic_cls, "partition_data")
    partition = _build(partition_cls, index=0, records=bytes(record_bytes))
    topic = _build(topic_cls, name=TOPIC, partition_data=(partition,))
    body = _encode(
        _build(
            cls,
            transactional_id=None,
            acks=1,
            timeout=datetime.timedelta(seconds=30),
            topic_data=(topic,),
        )
    )
    return request(PRODUCE, version, body)


@cache
def fetch_request(version: int = 16) -> bytes:
    """A consumer's fetch of one partition of ``TOPIC`` (by id from v13)."""
    cls = _schema("fetch", version, "request")
    topic_cls = _nested(cls, "topics")
    partition_cls = _nested(topic_cls, "partitions")
    partition = _build(partition_cls, partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    topic = _build(topic_cls, topic=TOPIC, topic_id=_TOPIC_ID, partitions=(partition,))
    body = _encode(
        _build(
            cls,
            max_wait=datetime.timedelta(milliseconds=500),
            min_bytes=1,
            max_bytes=50 << 20,
            session_id=0,
            session_epoch=-1,
            topics=(topic,),
            forgotten_topics_data=(),
            rack_id="",
            isolation_level=0,
        )
    )
    return request(FETCH, version, body)


@cache
def api_versions_request(version: int = 0) -> bytes:
    cls = _schema("api_versions", version, "request")
    body = _encode(_build(cls, client_software_name="bench", client_software_version="1"))
    return request(API_VERSIONS, version, body)


def with_correlation_id(frame: bytes, correlation_id: int) -> bytes:
    """``frame`` (a request built here) with another correlation id: requests pipelined
    on one connection need distinct ids, as a proxy matches responses by them."""
    return frame[:8] + struct.pack(">i", correlation_id) + frame[12:]


def canned_response(
    key: int, version: int, correlation_id: int = 1, partitions: int = 10, port: int = 9092
) -> bytes:
    """The whole response frame this responder sends to a request (for in-process benches)."""
    answer = _Answers(partitions, port).get(key, version)
    if answer is None:
        raise ValueError(f"the responder does not answer api key {key} v{version}")
    return struct.pack(">ii", answer[0], correlation_id) + answer[1]


def read_frame(sock: socket.socket, scratch: bytearray) -> int:
    """Read one response frame into ``scratch`` (grown as needed); return its size."""
    head = bytearray(4)
    _recv_into(sock, memoryview(head))
    (size,) = struct.unpack(">i", head)
    if len(scratch) < size:
        scratch.extend(bytes(size - len(scratch)))
    _recv_into(sock, memoryview(scratch)[:size])
    return size


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionError("connection closed by peer")
        got += n


def roundtrip(sock: socket.socket, frame: bytes, scratch: bytearray | None = None) -> int:
    sock.sendall(frame)
    return read_frame(sock, scratch if scratch is not None else bytearray())


def ceiling(port: int, seconds: float = 2.0, version: int = 1) -> tuple[float, int]:
    """(Metadata responses/s, response size) one client gets straight from the responder."""
    frame = metadata_request(version)
    scratch = bytearray()
    count, size = 0, 0
    with socket.create_connection((LOOPBACK, port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        deadline = time.perf_counter() + seconds
        start_t = time.perf_counter()
        while time.perf_counter() < deadline:
            size = roundtrip(sock, frame, scratch)
            count += 1
        elapsed = time.perf_counter() - start_t
    return count / elapsed, size + 4


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--ceiling", type=float, default=2.0, help="seconds to measure its own ceiling; 0: skip"
    )
    parser.add_argument("--serve-for", type=float, default=None, help="seconds; default: ^C")
    args = parser.parse_args(argv)
    with start(args.partitions, args.processes, args.port) as responder:
        print(
            f"responder on {LOOPBACK}:{responder.port}: {args.partitions} partitions, "
            f"{args.processes} processes",
            flush=True,
        )
        if args.ceiling > 0:
            rate, size = ceiling(responder.port, args.ceiling)
            print(f"ceiling: {rate:,.0f} Metadata v1/s of {size:,} bytes, one client", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            time.sleep(args.serve_for if args.serve_for is not None else 1e9)
    return 0


if __name__ == "__main__":
    sys.exit(main())
