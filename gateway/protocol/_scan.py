# cython: language_level=3, annotation_typing=False, cdivision=True
# cython: boundscheck=False, wraparound=False
"""The scanner: pure functions over a read's bytes and the in-flight table, and every
rule its loops hold a frame to, in one source for both builds. Cython compiles this file
as it stands (``_scan.pxd`` gives the C types) for the compiled reads (``_lane.pyx``),
over the C tables (``_tables.pyx``, ``_inflight_entry``); the same file runs as plain
Python over the tables' twins (``_tables_py``) without a C compiler or with
``KAFKA_GATEWAY_PURE_PYTHON=1`` (``_scanner`` picks), and in the readers' loops
(``_rules``, ``_headers``, through ``_hot``). test_scan.py holds the two builds to each
other; test_one_source.py fails if a rule is written twice. Every rule the scans run per
frame is in this one module so that the C compiler inlines it into the loops: a call
into another compiled module goes through a pointer and is never inlined (bench/README.md).
Only what reads the same in both builds is written here, and a function says "not here"
or "impossible" by a value, not an exception (a cost the compiled loops cannot pay per
frame); the names that differ are cimported (``_scan.pxd``) or imported from
``_scan_names``. What the scans take and why: docs/hot-path.md#the-compiled-lane.
"""

from __future__ import annotations

from typing import Any

from ._apis import SASL_HANDSHAKE

try:
    import cython
except ModuleNotFoundError:  # uncompiled, without Cython installed
    from . import _nocython as cython  # type: ignore[no-redef]

if not cython.compiled:  # the compiled build cimports these (_scan.pxd)
    from ._hot import plain
    from ._scan_names import (
        clock,
        count_request,
        count_response,
        drop_first,
        head_start,
        keep_walk,
        read_int16,
        read_int32,
    )

    InFlightRequest = plain("_inflight_entry").InFlightRequest

COMPILED = cython.compiled
_PRODUCE = 0
# Where a read or skip ends when the bytes end first (-1), or when what they say cannot
# be (-2: a length below -1, a count that cannot fit in the bytes left).
NOT_HERE = -1
IMPOSSIBLE = -2
# Walk steps' kinds (``_walk.tail_program``, whose kinds these are).
_W_SKIP = 0
_W_BLOB = 1
_W_STRUCT = 3
_W_ARRAY_OF_ENTITIES = 4
_W_ARRAY_OF_FIXED = 5


# -- the wire: lengths and tagged sections in buf[:end], acks, the walk to the tail -----


def _uvarint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after); NOT_HERE at the end, IMPOSSIBLE past 5 bytes (an int32)."""
    result = 0
    shift = 0
    while pos < end:
        byte = buf[pos]
        result |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 35:
            return 0, IMPOSSIBLE
    return 0, NOT_HERE


def _length(buf: bytes, pos: int, end: int, flexible: bool, width: int) -> tuple[int, int]:
    """A length or count and the position after: compact (uvarint of length + 1), or not."""
    if flexible:
        value, pos = _uvarint(buf, pos, end)
        return value - 1, pos
    if pos + width > end:
        return 0, NOT_HERE
    return (read_int16(buf, pos) if width == 2 else read_int32(buf, pos)), pos + width


def _skip_blob(buf: bytes, pos: int, end: int, flexible: bool, width: int) -> int:
    """Past a string, bytes or records (nullable: length -1)."""
    length, pos = _length(buf, pos, end, flexible, width)
    if pos < 0:
        return pos
    if length < -1:
        return IMPOSSIBLE
    if length > end - pos:
        return NOT_HERE
    return pos + length if length > 0 else pos


def skip_tags(buf: bytes, pos: int, end: int) -> int:
    """Past a tagged-field section (count, then tag, size and bytes each)."""
    count, pos = _uvarint(buf, pos, end)
    if pos < 0:
        return pos
    if count > end - pos:  # each field takes a byte at least
        return NOT_HERE
    for _i in range(count):
        _tag, pos = _uvarint(buf, pos, end)
        if pos < 0:
            return pos
        size, pos = _uvarint(buf, pos, end)
        if pos < 0:
            return pos
        if size > end - pos:
            return NOT_HERE
        pos += size
    return pos


def produce_acks_at(buf: bytes, pos: int, end: int, version: int) -> int:
    """Where the acks of the Produce request whose api key is at ``buf[pos]`` lie, read
    within ``buf[:end]``; NOT_HERE when the bytes end first, IMPOSSIBLE when a length
    before it cannot be. A Produce with acks=0 gets no answer from Kafka, so the
    in-flight table must not wait for one."""
    # After key, version and correlation id: client_id, a nullable int16 string in every
    # header version; from v9 (header v2) tagged fields; from v3 a transactional_id
    # (compact from v9). v0-v2 (Kafka 3.9 takes them) have acks right after the header.
    pos = _skip_blob(buf, pos + 8, end, False, 2)
    if pos >= 0 and version >= 9:
        pos = skip_tags(buf, pos, end)
    if pos >= 0 and version >= 3:
        pos = _skip_blob(buf, pos, end, version >= 9, 2)
    if pos >= 0 and pos + 2 > end:
        return NOT_HERE
    return pos


def scanner_takes_key(key: int) -> bool:
    """Whether a PlainTable may take requests of ``key``: not a SaslHandshake, whose
    mechanism starts a login and which raw SASL tokens may follow (``_rules.TOKENS``)."""
    return key != SASL_HANDSHAKE


def walk_tail(program: Any, at: int, buf: bytes, pos: int, end: int) -> int:
    """Where the program at ``program[at]`` (``_walk.tail_program``'s integers) ends over
    ``buf`` from ``pos``; -1 when the bytes do not walk within ``buf[:end]``. A count
    that cannot fit in what is left (each item takes a byte at least) is refused at once.
    ``_walk.tags_offset`` walks the same schema resumably; the tests hold them to one end."""
    flags = program[at]
    flexible = flags & 1
    step = at + 2
    stop = step + program[at + 1]
    while step < stop:
        kind = program[step]
        arg = program[step + 1]
        step += 2
        if kind == _W_SKIP:
            pos += arg  # checked by the next read, or at the end
            continue
        if kind == _W_BLOB:
            pos = _skip_blob(buf, pos, end, flexible, arg)
            if pos < 0:
                return -1
            continue
        element = step
        if kind in (_W_STRUCT, _W_ARRAY_OF_ENTITIES):
            step = element + 2 + program[element + 1]
        if kind == _W_STRUCT:
            if arg:  # nullable: a presence byte, int8 -1 for null (KIP-893)
                if pos >= end:
                    return -1
                pos += 1
                if buf[pos - 1] == 0xFF:
                    continue
            pos = walk_tail(program, element, buf, pos, end)
            if pos < 0:
                return -1
            continue
        count, pos = _length(buf, pos, end, flexible, 4)
        if pos < 0 or count < -1 or count > end - pos:
            return -1
        if kind == _W_ARRAY_OF_FIXED:
            if count > 0:
                pos += count * arg
            continue
        for _i in range(count):
            if kind == _W_ARRAY_OF_ENTITIES:
                pos = walk_tail(program, element, buf, pos, end)
            else:  # an array of strings or bytes
                pos = _skip_blob(buf, pos, end, flexible, arg)
            if pos < 0:
                return -1
    if flags & 2 and flexible:
        if pos >= end:
            return -1
        pos = skip_tags(buf, pos, end)
    if pos > end or pos < 0:
        return -1
    return pos


def tail_empty(program: Any, buf: bytes, pos: int, end: int) -> bool:
    """Whether the response from ``pos`` (after its correlation id) to ``end`` is a header
    v1 and a body whose top-level tagged section, its last byte, is empty."""
    pos = skip_tags(buf, pos, end)
    if pos < 0:
        return False
    pos = walk_tail(program, 0, buf, pos, end)
    return pos == end - 1 and buf[pos] == 0


# -- the scans, and the rules they hold a frame to -------------------------------------


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


def answers(entry: Any, correlation_id: int) -> bool:
    """Whether a response with ``correlation_id`` answers ``entry``, the oldest request
    sent upstream not answered yet (a broker answers in order): the ids match, and it
    went upstream and awaits an answer (an acks=0 produce awaits none;
    ``InFlight.match_upstream`` says when a response is its answer all the same)."""
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
    ``entries[index]`` (``entry``), the oldest not answered (of ``count``): it answers it
    (``answers``), no handler of the gateway's own waits for it (``context``: the readers
    hand it over) and answering it lets no local answer behind it go out (``releases_local``)."""
    return (
        entry.context is None
        and answers(entry, correlation_id)
        and not (index + 1 < count and releases_local(entries, index + 1))
    )


def replace_head(head: Any, buf: bytes, pos: int, written: int, pieces: list[bytes]) -> int:
    """Put in ``pieces`` what comes before the response at ``pos`` since ``written`` and
    its new start: the new length prefix, its correlation id and the rewritten head
    (``head``: a LastHead, (original, rewritten, ...)). Returns how far ``pieces`` has ``buf``."""
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
    """Take the whole requests from ``start`` that ``table`` (a ``PlainTable``) says the
    gateway forwards, with answers it forwards, walks or heads, not a SaslHandshake, and
    for a Produce acks other than 0; each gets an entry at the end of ``entries`` (the
    in-flight table's) and a count. Returns the bytes taken, which go upstream as came."""
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
        if not cython.compiled:  # compiled, the type's new has set these
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
    """Take the whole responses from ``start`` that answer the oldest entries
    (``takes_answer``): a walked one only when its top-level tagged section is empty, a
    headed one when its head is the one last rewritten for the address book now (its new
    start goes in ``pieces``, which replace the bytes taken). Each answered entry leaves
    the table, is counted, and goes to ``done`` if a list. Returns the bytes taken."""
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
