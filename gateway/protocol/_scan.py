# cython: language_level=3, annotation_typing=False, cdivision=True
# cython: boundscheck=False, wraparound=False
"""The scanner: pure functions over a read's bytes and the in-flight table, and the
rules each frame they take is held to, in one source for both builds.

Cython compiles this file as it stands (``_scan.pxd`` gives the C types), with the
wire's reads (``_hotwire``) and the C tables (``_tables.pyx``, ``_inflight_entry``), for
the connection's compiled reads (``gateway/server/_lane.pyx``); without a C compiler,
or with ``KAFKA_GATEWAY_PURE_PYTHON=1``, the same file runs as plain Python over the
tables' Python twins (``_tables_py``): ``_scanner`` says which build a process runs.
The readers' own loops (``_rules``) run its rules as plain Python (``_hot``).
tests/unit/gateway/protocol/test_scan.py holds the two builds to each other on the
same inputs, and test_one_source.py fails if one of these rules is written twice.

The readers (``RequestReader``, ``ResponseReader``) call the scanner first on a read
that starts at a frame boundary, and handle only what it leaves. The scanner takes
the frames the gateway forwards untouched, the commonest by far, and stops at the
first frame that needs a decision: the readers then take that frame and the rest of
the read. It never fails and never says why it stopped; a frame it leaves is read
again, and judged, by the reader. Its contract:

* ``scan_requests(buf, start, end, table, entries, counts, max_frame_bytes)`` takes the
  whole requests from ``start`` whose key and version ``table`` (a ``PlainTable``) says
  the gateway forwards and whose responses it forwards, walks or heads, that are not a
  SaslHandshake, and, for a Produce, that have acks other than 0. Each gets an entry
  at the end of ``entries`` (the in-flight table's, ``InFlight.entries``) and a count in
  ``counts``; it returns the bytes taken, which go upstream as they came.
* ``match_responses(buf, start, end, table, entries, counts, max_frame_bytes, pieces,
  done)`` takes the whole responses from ``start`` that answer the table's oldest
  entry, while answering it lets no local answer behind it go out (the reader releases
  those). A walked response (Produce v10+, Fetch v16+) is taken only when its top-level
  tagged section is empty (then nothing in it is rewritten); a headed one (Metadata)
  only when its head is the one last rewritten (``table.heads``) for the address
  book's generation now: its new start goes in ``pieces`` (the bytes before it too,
  and after it up to what was taken), which then replace the taken bytes. Each
  answered entry leaves the table, is counted, and goes to ``done`` when it is a list
  (the request log). Returns the bytes taken.

Only what reads the same in Python and in Cython is written here (see ``_hotwire``);
the few names that differ between the builds (the C tables' clock and counts) are
cimported by the compiled build (``_scan.pxd``) and bound below for the plain one.
Why each rule holds: docs/protocol.md#wire-rules.
"""

from __future__ import annotations

import struct
from time import perf_counter
from typing import Any

try:
    import cython
except ModuleNotFoundError:  # uncompiled, without Cython installed
    from . import _nocython as cython  # type: ignore[no-redef]

if not cython.compiled:  # the compiled build cimports these (_scan.pxd)
    from ._hot import plain

    _wire = plain("_hotwire")
    produce_acks_at = _wire.produce_acks_at
    read_int16 = _wire.read_int16
    read_int32 = _wire.read_int32
    tail_empty = _wire.tail_empty
    walk_tail = _wire.walk_tail
    InFlightRequest = plain("_inflight_entry").InFlightRequest
    clock = perf_counter

    def count_request(counts: Any, key: int, version: int) -> None:
        counts.request(key, version)

    def count_response(counts: Any, key: int, version: int, elapsed: float) -> None:
        counts.response(key, version, elapsed)

    def keep_walk(key: int, version: int, program: tuple[int, ...]) -> tuple[int, ...]:
        return program

    def drop_first(entries: list[Any], count: int) -> None:
        del entries[:count]

    _INT32 = struct.Struct(">i")

    def head_start(size: int, buf: bytes, pos: int, rewritten: bytes) -> bytes:
        return _INT32.pack(size) + buf[pos + 4 : pos + 8] + rewritten


COMPILED = cython.compiled
_PRODUCE = 0


# -- frame bounds -------------------------------------------------------------------------


def request_end(size: int, pos: int, max_frame_bytes: int) -> int:
    """Where the request whose length prefix at ``pos`` says ``size`` ends, or -1 when
    that size rules it out: under 8 (its api key, version and correlation id) or over
    ``max_frame_bytes`` (the connection then closes, as on a broker)."""
    if size < 8 or size > max_frame_bytes:
        return -1
    return pos + 4 + size


def response_end(size: int, pos: int, max_frame_bytes: int) -> int:
    """As ``request_end``, for a response: at least its correlation id (4)."""
    if size < 4 or size > max_frame_bytes:
        return -1
    return pos + 4 + size


# -- answers the oldest request -----------------------------------------------------------


def answers(entry: Any, correlation_id: int) -> bool:
    """Whether a response with ``correlation_id`` answers ``entry`` when ``entry`` is
    the oldest request sent upstream that is not answered yet (a broker answers in
    order; ``InFlight``): the ids match, and the request went upstream and awaits an
    answer. (An acks=0 produce awaits none; ``InFlight.match_upstream`` says when a
    response is its answer all the same.)"""
    return (
        entry.correlation_id == correlation_id
        and entry.expects_response
        and entry.to_upstream
        and entry.local is None
    )


def releases_local(entries: list[Any], after: int) -> bool:
    """Whether answering the entry before ``after`` lets a local answer behind it go
    out (only acks=0 produces between them, which get no answer): ``InFlight.finish``
    does that, so the loops leave such an answer to it."""
    count = len(entries)
    while after < count:  # no copy of the rest of the table, no iterator: a frame's cost
        entry = entries[after]
        if entry.local is not None:
            return True
        if entry.expects_response:
            return False
        after += 1
    return False


def takes_answer(
    entry: Any, correlation_id: int, entries: list[Any], index: int, count: int
) -> bool:
    """Whether the loops take a response with ``correlation_id`` as the answer to
    ``entry``, ``entries[index]``, the oldest entry not answered yet (``count``: the
    entries): it answers it (``answers``), no handler of the gateway's own waits for it
    (``context``: the readers hand it over) and answering it lets no local answer behind
    it go out (``releases_local``)."""
    return (
        entry.context is None
        and answers(entry, correlation_id)
        and not (index + 1 < count and releases_local(entries, index + 1))
    )


# -- a head replaced ----------------------------------------------------------------------


def replace_head(head: Any, buf: bytes, pos: int, written: int, pieces: list[bytes]) -> int:
    """Put in ``pieces`` what comes before the response at ``pos`` since ``written``
    and its new start: the length prefix for the new size, its correlation id and the
    rewritten head (``head``: a LastHead, (original, rewritten, ...)). Returns up to
    where ``buf`` is now in ``pieces``."""
    original: bytes = head[0]
    rewritten: bytes = head[1]
    if rewritten is original:
        return written  # nothing to change: the response goes out as it came
    old = len(original)
    p = buf  # compiled: the bytes' own memory
    size = read_int32(p, pos) + len(rewritten) - old  # at least 4: it held ``original``
    if pos > written:
        pieces.append(p[written:pos])
    pieces.append(head_start(size, buf, pos, rewritten))
    return pos + 8 + old


# -- the two scans ------------------------------------------------------------------------


def tail_offset(key: int, version: int, program: tuple[int, ...], body: bytes) -> int:
    """Where the walk of ``body``, a response body of ``key``/``version`` whose walk is
    ``program`` (``tail_program``), ends, or -1 (the tests hold it to ``tags_offset``)."""
    kept = keep_walk(key, version, program)
    return walk_tail(kept, 0, body, 0, len(body))


def scan_requests(
    buf: bytes,
    start: int,
    end: int,
    table: Any,
    entries: list[Any],
    counts: Any,
    max_frame_bytes: int,
) -> int:
    """Take the plain whole requests of ``buf[start:end]`` (see the module docstring);
    return the bytes taken."""
    p = buf  # compiled: the bytes' own memory
    pos = start
    now = clock()  # one clock a read: its requests arrived together
    if end > len(buf):
        end = len(buf)
    while end - pos >= 12:
        stop = request_end(read_int32(p, pos), pos, max_frame_bytes)
        if stop < 0 or stop > end:
            break
        key = read_int16(p, pos + 4)
        version = read_int16(p, pos + 6)
        if not table._takes(key, version):
            break
        if key == _PRODUCE:  # acks=0 gets no answer: the reader keeps it apart
            acks = produce_acks_at(p, pos + 4, stop, version)
            if acks < 0 or read_int16(p, acks) == 0:
                break
        entry = InFlightRequest.__new__(InFlightRequest)
        entry.api_key = key
        entry.api_version = version
        entry.correlation_id = read_int32(p, pos + 8)
        entry.started = now
        entry.request_bytes = stop - pos
        entry.response_bytes = 0
        entry.local = entry.context = None
        entry.to_upstream = entry.expects_response = True
        entries.append(entry)
        count_request(counts, key, version)
        pos = stop
    return pos - start


def match_responses(
    buf: bytes,
    start: int,
    end: int,
    table: Any,
    entries: list[Any],
    counts: Any,
    max_frame_bytes: int,
    pieces: list[bytes],
    done: list[Any] | None,
) -> int:
    """Take the whole responses of ``buf[start:end]`` that answer the table's oldest
    plain entries (see the module docstring); return the bytes taken."""
    if not entries:
        return 0
    p = buf
    pos = written = start
    now = clock()
    if end > len(buf):
        end = len(buf)
    answered = 0
    count = len(entries)
    while end - pos >= 8 and answered < count:
        stop = response_end(read_int32(p, pos), pos, max_frame_bytes)
        if stop < 0 or stop > end:
            break
        entry = entries[answered]
        if not takes_answer(entry, read_int32(p, pos + 4), entries, answered, count):
            break
        key = entry.api_key
        version = entry.api_version
        if not table._forwarded(key, version):
            program = table._walk_of(key, version)
            if program:
                if not tail_empty(program, p, pos + 8, stop):
                    break
            elif table._headed(key, version):
                head = table._last_head(key, version, p, pos, stop)
                if head is None:
                    break
                written = replace_head(head, buf, pos, written, pieces)
            else:
                break
        entry.response_bytes = stop - pos
        count_response(counts, key, version, now - entry.started)
        answered += 1
        if done is not None:
            done.append(entry)
        pos = stop
    if answered:
        drop_first(entries, answered)  # one move of the rest, however many were answered
    if written > start and pos > written:
        pieces.append(p[written:pos])  # compiled: a copy of the bytes, no slice object
    return pos - start
