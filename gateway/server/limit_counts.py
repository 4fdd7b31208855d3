"""The counts behind the connection caps and the creation-rate bucket (issue 13).

``ConnectionLimits`` (limits.py) decides; these hold the numbers it decides on:

* ``LocalCounts``: one process (``workers = 1``). Plain dicts, no locks: the event loop
  is the only thread that touches them, so a single gateway pays what it always did.
* ``SharedCounts``: several workers behind SO_REUSEPORT listeners. The kernel picks the
  worker for each new connection, so no worker can enforce a gateway-wide cap on its own
  counts (a per-worker share refuses early when the spread is uneven and lets a client
  that lands everywhere exceed its cap). One table in shared memory, which the
  supervisor creates and every worker maps, holds:

  - per worker, its open connections (the total is their sum);
  - a fixed-capacity open-addressing table of client addresses (IPv4 as IPv4-mapped
    IPv6, 16 bytes) with, per worker, that address's open connections;
  - one token bucket for ``max_connection_creation_rate``.

  Counts are kept per worker (a column each) so that when a worker dies, the supervisor
  zeroes its column: the kernel closed its sockets, and its connections must stop
  counting against the caps even though the worker never released them.

  The lock is ``flock`` on the table's file, not a ``multiprocessing`` semaphore: the
  kernel drops an flock when its holder dies, so a worker killed while holding it (OOM
  killer, SIGKILL) cannot wedge every other worker's accepts. It is taken once per
  accepted and once per closed connection, never per request.
"""

from __future__ import annotations

import fcntl
import ipaddress
import mmap
import os
import struct
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from ..observability.logging import RateLimitedLogger

limited = RateLimitedLogger("gateway.limits")

# Open-addressing slot states.
EMPTY, USED, DELETED = 0, 1, 2
MAGIC = 0x4B47_4C49_4D31  # "KGLIM1"
# magic, workers, capacity, used slots, deleted slots, refill time (ns), tokens (float)
_HEAD = struct.Struct("<qqqqqqd")
# Most distinct client addresses the table tracks at once; with a per-IP cap set, a new
# address beyond it is refused (connection.refused says why). 32768 addresses at twice
# the slots stay under 3 MB for 2 workers.
MAX_ADDRESSES = 32768
NO_LIMIT = 2**31 - 1


def ip_key(ip: str) -> bytes:
    """16 bytes per address, IPv4 as IPv4-mapped IPv6 (one key per client whichever
    family the listener reports)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:  # not an IP (a Unix socket's "?"): still one key per string
        return zlib.crc32(ip.encode()).to_bytes(4, "little") + b"\1" * 12
    if isinstance(addr, ipaddress.IPv4Address):
        return b"\0" * 10 + b"\xff\xff" + addr.packed
    mapped = addr.ipv4_mapped
    return (b"\0" * 10 + b"\xff\xff" + mapped.packed) if mapped else addr.packed


class LocalCounts:
    """One process: dicts and a float bucket."""

    def __init__(self, rate: float) -> None:
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.rate = rate
        self._tokens = rate
        self._refilled = time.monotonic_ns()

    def admit(self, ip: str, max_total: int, cap: int, per_ip: bool) -> str | None:
        if self.total >= max_total:
            return "max_connections"
        count = self.per_ip.get(ip, 0)
        if per_ip and count >= cap:
            return "max_connections_per_ip"
        self.total += 1
        self.per_ip[ip] = count + 1
        return None

    def release(self, ip: str) -> None:
        self.total -= 1
        left = self.per_ip.get(ip, 1) - 1
        if left > 0:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)

    def reserve(self, max_wait_s: float) -> float | None:
        self._tokens, self._refilled, wait = _reserve(
            self._tokens, self._refilled, self.rate, max_wait_s
        )
        return wait


def _reserve(
    tokens: float, refilled_ns: int, rate: float, max_wait_s: float
) -> tuple[float, int, float | None]:
    """A token bucket with reservations (Kafka's acceptor throttle): ``rate`` tokens a
    second, at most ``rate`` saved up. A connection takes a token now, or reserves the
    next one and waits until it is due (tokens go negative: each reservation queues
    behind the earlier ones). A wait longer than ``max_wait_s`` reserves nothing: None.
    Returns the new (tokens, refill time) and the wait in seconds."""
    now = time.monotonic_ns()  # CLOCK_MONOTONIC: one clock for every process
    tokens = min(rate, tokens + (now - refilled_ns) / 1e9 * rate)
    if tokens >= 1:
        return tokens - 1, now, 0.0
    wait = (1 - tokens) / rate
    if wait > max_wait_s:
        return tokens, now, None
    return tokens - 1, now, wait


class SharedCounts:
    """The table in shared memory; see the module docstring. The supervisor makes it
    (``create``) and opens it with no column; each worker opens it by path with its own
    column (spawned workers inherit no mapping, and each needs its own open file for
    flock to exclude the others)."""

    def __init__(self, path: str, worker: int | None, rate: float = 0.0) -> None:
        self.path = path
        self.worker = worker  # this process's column; None in the supervisor
        self._fd = os.open(path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, 0)
        magic, self.workers, self.capacity, *_ = _HEAD.unpack_from(self._map, 0)
        if magic != MAGIC:
            raise ValueError(f"{path} is not a connection-limits table")
        self.rate = rate  # every worker has the same config: not in the table
        self._totals = _HEAD.size
        self._slots = self._totals + 8 * self.workers
        self._slot = struct.Struct(f"<16sq{self.workers}q")
        self._count = struct.Struct("<q")

    @classmethod
    def create(cls, workers: int, per_ip: bool, max_connections: int, rate: float) -> str:
        """Make the table file (in /dev/shm: memory, not disk); returns its path. The
        per-address table exists only when a per-IP cap is set."""
        capacity = 0
        if per_ip:
            capacity = 64
            while capacity < 2 * min(max_connections, MAX_ADDRESSES):
                capacity *= 2
        slot = 16 + 8 + 8 * workers
        size = _HEAD.size + 8 * workers + capacity * slot
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, path = tempfile.mkstemp(prefix="kafka-gateway-limits-", dir=folder)
        try:
            os.ftruncate(fd, size)  # zero-filled: every slot EMPTY, every count 0
            head = _HEAD.pack(MAGIC, workers, capacity, 0, 0, time.monotonic_ns(), rate)
            os.pwrite(fd, head, 0)
        finally:
            os.close(fd)
        return path

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    # -- totals ----------------------------------------------------------------------
    def total(self) -> int:
        return sum(
            self._count.unpack_from(self._map, self._totals + 8 * w)[0] for w in range(self.workers)
        )

    def _add_total(self, delta: int) -> None:
        assert self.worker is not None
        at = self._totals + 8 * self.worker
        self._count.pack_into(self._map, at, self._count.unpack_from(self._map, at)[0] + delta)

    # -- the address table -----------------------------------------------------------
    def _probe(self, key: bytes) -> tuple[int | None, int | None]:
        """(slot holding key or None, first free slot on its probe path or None)."""
        free = None
        start = zlib.crc32(key) & (self.capacity - 1)
        for i in range(self.capacity):
            index = (start + i) & (self.capacity - 1)
            at = self._slots + index * self._slot.size
            state = self._count.unpack_from(self._map, at + 16)[0]
            if state == EMPTY:
                return None, free if free is not None else index
            if state == DELETED:
                if free is None:
                    free = index
            elif self._map[at : at + 16] == key:
                return index, free
        return None, free

    def _row(self, index: int) -> tuple[bytes, int, list[int]]:
        key, state, *counts = self._slot.unpack_from(
            self._map, self._slots + index * self._slot.size
        )
        return key, state, counts

    def _write(self, index: int, key: bytes, state: int, counts: list[int]) -> None:
        self._slot.pack_into(self._map, self._slots + index * self._slot.size, key, state, *counts)

    def _head(self) -> tuple[int, int]:
        used, deleted = struct.unpack_from("<qq", self._map, 24)
        return used, deleted

    def _set_head(self, used: int, deleted: int) -> None:
        struct.pack_into("<qq", self._map, 24, used, deleted)

    def per_ip(self, ip: str) -> int:
        """Open connections from ``ip`` over every worker (tests, /connections)."""
        if not self.capacity:
            return 0
        with self._locked():
            index, _ = self._probe(ip_key(ip))
            return 0 if index is None else sum(self._row(index)[2])

    # -- what ConnectionLimits calls -----------------------------------------------------
    def admit(self, ip: str, max_total: int, cap: int, per_ip: bool) -> str | None:
        assert self.worker is not None
        with self._locked():
            if self.total() >= max_total:
                return "max_connections"
            if per_ip and self.capacity:
                key = ip_key(ip)
                index, free = self._probe(key)
                if index is not None:
                    _, _, counts = self._row(index)
                    if sum(counts) >= cap:
                        return "max_connections_per_ip"
                    counts[self.worker] += 1
                    self._write(index, key, USED, counts)
                else:
                    used, deleted = self._head()
                    if free is None or used >= self.capacity // 2:
                        # The table is full (see create): refused, and said why, since
                        # this address is under its cap.
                        limited.warning(
                            "limits.address_table_full",
                            limit_key="address_table_full",
                            addresses=used,
                            peer_ip=ip,
                        )
                        return "max_connections_per_ip"
                    counts = [0] * self.workers
                    counts[self.worker] = 1
                    if self._row(free)[1] == DELETED:
                        deleted -= 1
                    self._write(free, key, USED, counts)
                    self._set_head(used + 1, deleted)
            self._add_total(1)
            return None

    def release(self, ip: str) -> None:
        assert self.worker is not None
        with self._locked():
            self._add_total(-1)
            if not self.capacity:
                return
            key = ip_key(ip)
            index, _ = self._probe(key)
            if index is None:
                return  # cleared already (clear_worker after a restart of this column)
            _, _, counts = self._row(index)
            counts[self.worker] = max(0, counts[self.worker] - 1)
            self._store(index, key, counts)

    def _store(self, index: int, key: bytes, counts: list[int], compact: bool = True) -> None:
        if any(counts):
            self._write(index, key, USED, counts)
            return
        # Nobody from this address is left: a tombstone, so probe paths through the
        # slot stay intact; _compact clears them once they pile up.
        used, deleted = self._head()
        self._write(index, key, DELETED, [0] * self.workers)
        self._set_head(used - 1, deleted + 1)
        if compact and deleted + 1 > self.capacity // 4:
            # Probes run to an EMPTY slot: without this, churn of addresses would
            # leave none and every probe would walk the whole table.
            self._compact()

    def _compact(self) -> None:
        """Rebuild the table without tombstones (under the lock)."""
        live = []
        for index in range(self.capacity):
            key, state, counts = self._row(index)
            if state == USED:
                live.append((key, counts))
        empty = b"\0" * (self.capacity * self._slot.size)
        self._map[self._slots : self._slots + len(empty)] = empty
        for key, counts in live:
            _, free = self._probe(key)
            assert free is not None
            self._write(free, key, USED, counts)
        self._set_head(len(live), 0)

    def reserve(self, max_wait_s: float) -> float | None:
        with self._locked():
            refilled, tokens = struct.unpack_from("<qd", self._map, 40)
            tokens, refilled, wait = _reserve(tokens, refilled, self.rate, max_wait_s)
            struct.pack_into("<qd", self._map, 40, refilled, tokens)
            return wait

    # -- the supervisor -------------------------------------------------------------------
    def clear_worker(self, worker: int) -> int:
        """A worker died: its connections are gone. Zero its column; returns how many
        connections it held."""
        with self._locked():
            at = self._totals + 8 * worker
            held = self._count.unpack_from(self._map, at)[0]
            self._count.pack_into(self._map, at, 0)
            for index in range(self.capacity):
                key, state, counts = self._row(index)
                if state == USED and counts[worker]:
                    counts[worker] = 0
                    self._store(index, key, counts, compact=False)  # slots stay put
            if self._head()[1] > self.capacity // 4:
                self._compact()
            return held
