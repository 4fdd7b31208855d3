"""The schema walk's CPU, in-process: two trees of the gateway compared in one run.

The walk (``gateway/protocol/_walk.py``) runs on every Produce v10+ and Fetch v16+
response the gateway forwards through its Python path, on every request body it decodes,
and on every Metadata or Fetch response that streams through it. Cases:

* ``tags_offset`` on a whole Produce v11 response (1 topic, 3 partitions) and on a small
  Fetch v16 response (1 partition, 1 KiB of records);
* ``measure`` on request bodies as the gateway decodes them: Produce v9 (3 partitions of
  1 KiB of records) and Metadata v12 (3 topics);
* a ``TailFinder`` fed a Fetch v16 response carrying ``--fetch-mib`` MiB of records (40
  partitions) in ``--chunk`` byte chunks, from just after its correlation id;
* a ``HeadFinder(3, 12, "brokers")`` fed a Metadata v12 response of 3 brokers and
  ``--partitions`` partitions in chunks: with its last head remembered (warm: one
  comparison) and missed (two responses whose brokers differ, fed in turn, so each is
  walked: what a changed cluster costs).

Each tree (``--before``, ``--after``: a checkout's root, its ``.so`` files built) runs in
its own process (``PYTHONPATH`` set to it), the two in turn for ``--rounds`` rounds; a
figure is the best over all rounds of the best of ``--repeat`` timings. The bodies are
built once, here, with kio. Prints one row per case: µs per call before, after, and the
ratio.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib
import json
import os
import pickle
import platform
import subprocess
import sys
import tempfile
import time
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
CASES = (
    "tags_offset Produce v11, 3 partitions",
    "tags_offset Fetch v16, 1 KiB records",
    "measure Produce v9 request, 3 partitions",
    "measure Metadata v12 request, 3 topics",
    "TailFinder Fetch v16, {fetch_mib} MiB in {chunk_kib} KiB chunks",
    "HeadFinder Metadata v12, {partitions} partitions, miss",
    "HeadFinder Metadata v12, {partitions} partitions, warm",
)


# -- the bodies (built once, in this process) ---------------------------------------------


def build_bodies(fetch_mib: int, partitions: int) -> dict[str, bytes]:
    sys.path.insert(0, str(HERE.parent))
    sys.path.insert(0, str(ROOT))
    import responder
    from kio.schema.errors import ErrorCode
    from responder import _build, _encode, _nested, _schema

    def produce_response() -> bytes:
        cls = _schema("produce", 11, "response")
        topic_cls = _nested(cls, "responses")
        partition_cls = _nested(topic_cls, "partition_responses")
        parts = tuple(
            _build(
                partition_cls,
                index=i,
                error_code=ErrorCode.none,
                base_offset=1000 * i,
                log_append_time=None,
                log_start_offset=0,
                record_errors=(),
                error_message=None,
            )
            for i in range(3)
        )
        topic = _build(topic_cls, name="bench-walk", partition_responses=parts)
        return _encode(_build(cls, throttle_time=datetime.timedelta(0), responses=(topic,)))

    def fetch_response(parts: int, record_bytes: int) -> bytes:
        return responder._fetch_body(16, parts, bytes(range(256)) * (record_bytes // 256))

    def produce_request() -> bytes:
        cls = _schema("produce", 9, "request")
        topic_cls = _nested(cls, "topic_data")
        partition_cls = _nested(topic_cls, "partition_data")
        parts = tuple(_build(partition_cls, index=i, records=bytes(1024)) for i in range(3))
        topic = _build(topic_cls, name="bench-walk", partition_data=parts)
        return _encode(
            _build(
                cls,
                transactional_id=None,
                acks=1,
                timeout=datetime.timedelta(seconds=30),
                topic_data=(topic,),
            )
        )

    def metadata_request() -> bytes:
        cls = _schema("metadata", 12, "request")
        topics_hint = typing.get_type_hints(cls)["topics"]  # a tuple of topics, or None
        topic_cls = typing.get_args(typing.get_args(topics_hint)[0])[0]
        topics = tuple(
            _build(topic_cls, topic_id=responder._TOPIC_ID, name=f"bench-walk-{i}")
            for i in range(3)
        )
        return _encode(
            _build(
                cls,
                topics=topics,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )

    header = b"\x00"  # response header v1's empty tagged section, after the correlation id
    big = (fetch_mib << 20) // 40
    return {
        "produce_response": produce_response(),
        "fetch_small": fetch_response(1, 1024),
        "produce_request": produce_request(),
        "metadata_request": metadata_request(),
        "fetch_big": header + fetch_response(40, big),
        "metadata_a": header + responder._metadata_body(12, partitions, 9092),
        "metadata_b": header + responder._metadata_body(12, partitions, 9093),
    }


# -- the timings (in a process whose ``gateway`` is one tree's) -----------------------------


def best(call: Callable[[], object], repeat: int, min_s: float = 0.05) -> float:
    """The best of ``repeat`` timings of ``call``, in µs a call."""
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            call()
        elapsed = time.perf_counter() - start
        if elapsed >= min_s:
            break
        number *= 2
    timings = [elapsed / number]
    for _ in range(repeat - 1):
        start = time.perf_counter()
        for _ in range(number):
            call()
        timings.append((time.perf_counter() - start) / number)
    return min(timings) * 1e6


def feed_all(finder: Any, data: bytes, chunk: int) -> int:
    mv = memoryview(data)
    pos = 0
    while not finder.found:
        end = min(pos + chunk, len(data))
        pos = finder.feed(mv, pos, end)
        if end == len(data) and not finder.found:
            raise AssertionError("the walk did not end")
    return pos


def cases(bodies: dict[str, bytes], chunk: int) -> dict[str, Callable[[], int]]:
    """Each case's call, in a process whose ``gateway`` is the tree measured."""
    from kio.index import load_request_schema

    from gateway.protocol import HeadFinder, TailFinder

    try:  # public from the one-walk change on
        from gateway.protocol import measure, tags_offset
    except ImportError:  # an older tree: the walk's own module
        walk = importlib.import_module("gateway.protocol._walk")
        measure, tags_offset = walk.measure, walk.tags_offset

    produce_v9 = load_request_schema(0, 9)
    metadata_v12 = load_request_schema(3, 12)
    produce, fetch = bodies["produce_response"], bodies["fetch_small"]
    produce_req, metadata_req = bodies["produce_request"], bodies["metadata_request"]
    big = bodies["fetch_big"]
    heads = [bodies["metadata_a"], bodies["metadata_b"]]

    def missed() -> int:  # the other response's head is the one remembered: walked
        heads.reverse()
        return feed_all(HeadFinder(3, 12, "brokers"), heads[0], chunk)

    missed()
    warm = heads[0]
    calls: list[Callable[[], int]] = [
        lambda: tags_offset(0, 11, produce),
        lambda: tags_offset(1, 16, fetch),
        lambda: measure(produce_v9, produce_req),
        lambda: measure(metadata_v12, metadata_req),
        lambda: feed_all(TailFinder(1, 16), big, chunk),
        missed,
        lambda: feed_all(HeadFinder(3, 12, "brokers"), warm, chunk),
    ]
    return dict(zip(CASES, calls, strict=True))


def worker(bodies_path: str, repeat: int, chunk: int, case: int, calls: int) -> dict[str, Any]:
    """µs a call of each case (``calls`` 0), or only ``calls`` calls of case ``case``
    (under cachegrind, which counts the instructions)."""
    import gateway

    with open(bodies_path, "rb") as f:
        bodies: dict[str, bytes] = pickle.load(f)
    runs = cases(bodies, chunk)
    gc.disable()  # as timeit does: a collection lands in one run and not another
    if calls:
        call = runs[CASES[case]]
        for _ in range(calls):
            call()
        return {}
    checks = {name: call() for name, call in runs.items()}
    us = {name: best(call, repeat) for name, call in runs.items()}
    return {"us": us, "checks": checks, "gateway": gateway.__file__}


def run_tree(root: Path, bodies_path: str, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [sys.executable, str(HERE), "--worker", bodies_path]
    command += ["--repeat", str(args.repeat), "--chunk", str(args.chunk)]
    done = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{root}: the worker failed\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    if not Path(result["gateway"]).is_relative_to(root):
        raise SystemExit(f"{root}: imported {result['gateway']}, not this tree's gateway")
    return result


def instructions(root: Path, bodies_path: str, args: argparse.Namespace, case: int) -> float:
    """Instructions a call of case ``case``: cachegrind's count for two numbers of calls
    in one process each, the difference divided by the difference (start-up cancels).
    The hash seed is fixed: a random one moves a case's count by up to a quarter."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"}
    few = 20 if case in (4, 5) else 200  # the streamed cases cost 100x the others
    counts = []
    for calls in (few, 3 * few):
        with tempfile.NamedTemporaryFile(suffix=".cachegrind") as out:
            command = ["valgrind", "--tool=cachegrind", "--cache-sim=no"]
            command += [f"--cachegrind-out-file={out.name}", sys.executable, str(HERE)]
            command += ["--worker", bodies_path, "--chunk", str(args.chunk)]
            command += ["--case", str(case), "--calls", str(calls)]
            done = subprocess.run(
                command, env=env, cwd=root, capture_output=True, text=True, check=False
            )
            if done.returncode:
                raise SystemExit(f"{root}: cachegrind failed\n{done.stderr[-2000:]}")
            summary = next(
                line
                for line in Path(out.name).read_text().splitlines()
                if line.startswith("summary:")
            )
            counts.append(int(summary.split()[1]))
    return (counts[1] - counts[0]) / (2 * few)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="the tree to compare with (a root)")
    parser.add_argument("--after", type=Path, default=ROOT, help="default: this tree")
    parser.add_argument("--rounds", type=int, default=3, help="each tree, in turn")
    parser.add_argument("--repeat", type=int, default=5, help="timings per case a round")
    parser.add_argument("--chunk", type=int, default=64 << 10, help="bytes a feed")
    parser.add_argument("--fetch-mib", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count instructions a call with valgrind's cachegrind (deterministic, "
        "unlike the timings on a busy machine; a few minutes)",
    )
    parser.add_argument("--worker", metavar="BODIES", help=argparse.SUPPRESS)
    parser.add_argument("--case", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeat, args.chunk, args.case, args.calls)))
        return 0
    trees = {"after": args.after.resolve()}
    if args.before is not None:
        trees = {"before": args.before.resolve(), **trees}
    bodies = build_bodies(args.fetch_mib, args.partitions)
    best_us: dict[str, dict[str, float]] = {label: {} for label in trees}
    with tempfile.NamedTemporaryFile(suffix=".pickle") as f:
        pickle.dump(bodies, f)
        f.flush()
        for n in range(args.rounds):
            order = list(trees) if n % 2 == 0 else list(reversed(trees))
            checks = []
            for label in order:
                result = run_tree(trees[label], f.name, args)
                checks.append(result["checks"])
                for name, us in result["us"].items():
                    best_us[label][name] = min(best_us[label].get(name, us), us)
            if any(c != checks[0] for c in checks):
                raise SystemExit(f"the trees' walks end in different places: {checks}")
        counted: dict[str, dict[str, float]] = {label: {} for label in trees}
        if args.instructions:
            for i, case in enumerate(CASES):
                for label, root in trees.items():
                    counted[label][case] = instructions(root, f.name, args, i)
    load = os.getloadavg()
    print(
        f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load {load[0]:.2f} {load[1]:.2f}; best of {args.rounds} rounds x {args.repeat}"
    )
    names = {
        "chunk_kib": args.chunk >> 10,
        "fetch_mib": args.fetch_mib,
        "partitions": f"{args.partitions:,}",
    }
    columns = [(best_us, "µs", "{:,.2f}")]
    if args.instructions:
        columns.append((counted, "instructions", "{:,.0f}"))
    head = ["case"]
    for _, unit, _ in columns:
        head += [f"{label} {unit}" for label in trees]
        head += ["after / before"] if len(trees) == 2 else []
    print("| " + " | ".join(head) + " |")
    print("| --- " * len(head) + "|")
    for case in CASES:
        cells = [case.format(**names)]
        for figures, _, form in columns:
            row = [figures[label][case] for label in trees]
            cells += [form.format(x) for x in row]
            cells += [f"{row[1] / row[0]:.2f}"] if len(row) == 2 else []
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
