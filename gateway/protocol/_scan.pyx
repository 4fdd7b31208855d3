# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The scanner, compiled: pure functions over a read's bytes and the in-flight table.

The readers (``RequestReader``, ``ResponseReader``) call the scanner first on a read
that starts at a frame boundary, and handle only what it leaves. The scanner takes
the frames the gateway forwards untouched, the commonest by far, and stops at the
first frame that needs a decision: the readers then take that frame and the rest of
the read. It never fails and never says why it stopped; a frame it leaves is read
again, and judged, by the reader. Its contract, which the Python twin
(``gateway/protocol/_scan_py.py``) keeps too and tests/unit/gateway/protocol/test_scan.py compares:

* ``scan_requests(buf, start, end, table, entries, counts, max_frame_bytes)`` takes the
  whole requests from ``start`` whose key and version ``table`` (a ``PlainTable``) says
  the gateway forwards and whose responses it forwards, walks or heads, that are not a
  SaslHandshake, and, for a Produce, that have acks other than 0. Each gets an entry
  at the end of ``entries`` (the in-flight table's, ``InFlight.entries``) and a count in
  ``counts``; it returns the bytes taken, which go upstream as they came.
* ``match_responses(buf, start, end, table, entries, counts, max_frame_bytes, pieces,
  done)`` takes the whole responses from ``start`` that answer the table's oldest
  entry, while that entry is one ``scan_requests`` could have made and answering it
  lets no local answer behind it go out (the reader releases those). A walked response
  (Produce v10+, Fetch v16+) is taken only when its top-level tagged section is empty
  (then nothing in it is rewritten); a headed one (Metadata) only when its head is the
  one last rewritten (``table.heads``) for the address book's generation now: its
  new start goes in ``pieces`` (the bytes before it too, and after it up to what was
  taken), which then replace the taken bytes. Each answered entry leaves the table, is
  counted, and goes to ``done`` when it is a list (the request log). Returns the bytes
  taken.

One in-flight table: the entries the scanner adds are the readers' own
(``InFlightRequest``), in one list (``InFlight.entries``), in order.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy

from ._cwire cimport read_int16, read_int32, read_length, skip_blob, skip_tags
from ._tables cimport (
    Counts,
    InFlightRequest,
    PlainTable,
    count_request,
    count_response,
    keep_walk,
    now as clock,
)

COMPILED = True


cdef extern from "Python.h":
    # With NULL for the items: deletes the slice (cpython.list declares it with object).
    int PyList_SetSlice(list entries, Py_ssize_t low, Py_ssize_t high, PyObject* items) except -1

cdef enum:
    # The kinds of a walk program's steps (gateway.protocol._walk.tail_program).
    W_SKIP = 0
    W_BLOB = 1
    W_STRUCT = 3
    W_ARRAY_OF_ENTITIES = 4
    W_ARRAY_OF_FIXED = 5
    PRODUCE = 0


# -- walking a response to its top-level tagged section --------------------------------------

cdef Py_ssize_t _walk(
    const int32_t* program, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end
) noexcept nogil:
    """Where ``program`` (``tail_program``) ends over ``buf`` from ``pos``; -1 when the
    bytes do not walk within ``buf[:end]``. The steps of ``_walk.walk``, but a count
    that cannot fit in what is left (each item takes a byte at least) is refused at
    once, so a claimed count costs nothing."""
    cdef bint flexible = program[0] & 1
    cdef const int32_t* step = program + 2
    cdef const int32_t* stop = step + program[1]
    cdef const int32_t* element
    cdef int kind, arg
    cdef int64_t count, i
    while step < stop:
        kind, arg = step[0], step[1]
        step += 2
        if kind == W_SKIP:
            pos += arg  # checked by the next read, or at the end
            continue
        if kind == W_BLOB:
            pos = skip_blob(buf, pos, end, flexible, arg)
            if pos < 0:
                return -1
            continue
        element = step
        if kind == W_STRUCT or kind == W_ARRAY_OF_ENTITIES:
            step = element + 2 + element[1]
        if kind == W_STRUCT:
            if arg:  # nullable: a presence byte, int8 -1 for null (KIP-893)
                if pos >= end:
                    return -1
                pos += 1
                if buf[pos - 1] == 0xFF:
                    continue
            pos = _walk(element, buf, pos, end)
            if pos < 0:
                return -1
            continue
        pos = read_length(buf, pos, end, flexible, 4, &count)
        if pos < 0 or count < -1 or count > end - pos:
            return -1
        if kind == W_ARRAY_OF_FIXED:
            if count > 0:
                pos += count * arg
            continue
        for i in range(count):
            if kind == W_ARRAY_OF_ENTITIES:
                pos = _walk(element, buf, pos, end)
            else:  # an array of strings or bytes
                pos = skip_blob(buf, pos, end, flexible, arg)
            if pos < 0:
                return -1
    if program[0] & 2 and flexible:
        if pos >= end:
            return -1
        pos = skip_tags(buf, pos, end)
    if pos > end:
        return -1
    return pos


def tail_offset(int key, int version, program, bytes body):
    """Where the walk of ``body``, a response body of ``key``/``version`` whose walk is
    ``program`` (``tail_program``), ends, or -1 (the tests hold it to ``tags_offset``)."""
    cdef const int32_t* kept = keep_walk(key, version, program)
    return _walk(kept, <const uint8_t*>PyBytes_AS_STRING(body), 0, len(body))


cdef bint _tail_empty(const int32_t* program, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """Whether the response from ``pos`` (after its correlation id) to ``end`` is a
    response header v1 and a body whose top-level tagged section, its last byte, is
    empty."""
    pos = skip_tags(buf, pos, end)
    if pos < 0:
        return False
    pos = _walk(program, buf, pos, end)
    return pos == end - 1 and buf[pos] == 0


cdef int _produce_acks(const uint8_t* p, Py_ssize_t size, int version) noexcept nogil:
    """acks of a whole Produce request (``p`` at its api key, ``size`` bytes), or 0 when
    it cannot be read here."""
    cdef Py_ssize_t pos
    # After key, version and correlation id: client_id, a nullable int16 string in every
    # header version; from v9 (header v2) tagged fields; from v3 a transactional_id
    # (compact from v9). v0-v2 (Kafka 3.9 takes them) have acks right after the header.
    pos = skip_blob(p, 8, size, False, 2)
    if pos >= 0 and version >= 9:
        pos = skip_tags(p, pos, size)
    if pos >= 0 and version >= 3:
        pos = skip_blob(p, pos, size, version >= 9, 2)
    if pos < 0 or pos + 2 > size:
        return 0
    return read_int16(p + pos)


# -- the two scans ------------------------------------------------------------------------------

cdef inline Py_ssize_t _frame_end(
    const uint8_t* buf, Py_ssize_t pos, Py_ssize_t n, int32_t minimum, int32_t maximum
) noexcept nogil:
    """Where the frame at ``pos`` ends, if its size is within bounds and it is all in
    ``buf[:n]``; else -1."""
    cdef int32_t size = read_int32(buf + pos)
    if size < minimum or size > maximum or pos + 4 + size > n:
        return -1
    return pos + 4 + size


cpdef Py_ssize_t scan_requests(
    bytes buf,
    Py_ssize_t start,
    Py_ssize_t end,
    PlainTable table,
    list entries,
    Counts counts,
    int max_frame_bytes,
) except -1:
    """Take the plain whole requests of ``buf[start:end]`` (see the module docstring);
    return the bytes taken."""
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(buf)
    cdef Py_ssize_t pos = start, stop
    cdef int key, version
    cdef InFlightRequest entry
    cdef double now = clock()  # one clock a read: its requests arrived together
    if end > PyBytes_GET_SIZE(buf):
        end = PyBytes_GET_SIZE(buf)
    while end - pos >= 12:
        stop = _frame_end(p, pos, end, 8, max_frame_bytes)
        if stop < 0:
            break
        key = read_int16(p + pos + 4)
        version = read_int16(p + pos + 6)
        if not (
            table._forwarded(key, version)
            or table._walk_of(key, version) != NULL
            or table._headed(key, version)
        ):
            break
        if key == PRODUCE and _produce_acks(p + pos + 4, stop - pos - 4, version) == 0:
            break
        entry = InFlightRequest.__new__(InFlightRequest)
        entry.api_key = key
        entry.api_version = version
        entry.correlation_id = read_int32(p + pos + 8)
        entry.started = now
        entry.request_bytes = stop - pos
        entry.to_upstream = entry.expects_response = True
        entries.append(entry)
        count_request(counts, key, version)
        pos = stop
    return pos - start


cpdef Py_ssize_t match_responses(
    bytes buf,
    Py_ssize_t start,
    Py_ssize_t end,
    PlainTable table,
    list entries,
    Counts counts,
    int max_frame_bytes,
    list pieces,
    list done,
) except -1:
    """Take the whole responses of ``buf[start:end]`` that answer the table's oldest
    plain entries (see the module docstring); return the bytes taken."""
    if not entries:
        return 0
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(buf)
    cdef Py_ssize_t pos = start, stop, written = start
    cdef InFlightRequest entry
    cdef const int32_t* walk
    cdef int key, version
    cdef double now = clock()
    if end > PyBytes_GET_SIZE(buf):
        end = PyBytes_GET_SIZE(buf)
    cdef Py_ssize_t answered = 0, count = len(entries)
    while end - pos >= 8 and answered < count:
        stop = _frame_end(p, pos, end, 4, max_frame_bytes)
        if stop < 0:
            break
        first = entries[answered]
        if type(first) is not InFlightRequest:
            break
        entry = <InFlightRequest>first
        if (
            not entry.to_upstream
            or not entry.expects_response
            or entry.context is not None
            or entry.local is not None
            or read_int32(p + pos + 4) != entry.correlation_id
            or _releases_local(entries, answered + 1)
        ):
            break
        key, version = entry.api_key, entry.api_version
        if not table._forwarded(key, version):
            walk = table._walk_of(key, version)
            if walk != NULL:
                if not _tail_empty(walk, p, pos + 8, stop):
                    break
            elif table._headed(key, version):
                head = table._last_head(key, version, p + pos, stop - pos)
                if head is None:
                    break
                written = _replace_head(head, buf, pos, written, pieces)
            else:
                break
        entry.response_bytes = stop - pos
        count_response(counts, key, version, now - entry.started)
        answered += 1
        if done is not None:
            done.append(entry)
        pos = stop
    if answered:
        # One move of the rest, however many were answered; the C call, as ``del
        # entries[:answered]`` makes a slice object each read.
        PyList_SetSlice(entries, 0, answered, NULL)
    if written > start and pos > written:
        pieces.append(PyBytes_FromStringAndSize(<const char*>p + written, pos - written))
    return pos - start


cdef bint _releases_local(list entries, Py_ssize_t after) except -1:
    """Whether answering the entry before ``after`` lets a local answer behind it go out
    (only acks=0 produces between them, which get no answer): the reader does that."""
    cdef Py_ssize_t i
    cdef InFlightRequest entry
    for i in range(after, len(entries)):
        if type(entries[i]) is not InFlightRequest:
            return True  # not one of ours: the reader decides
        entry = <InFlightRequest>entries[i]
        if entry.local is not None:
            return True
        if entry.expects_response:
            return False
    return False


cdef Py_ssize_t _replace_head(head, bytes buf, Py_ssize_t pos, Py_ssize_t written, list pieces) except -1:
    """Put in ``pieces`` what comes before the response at ``pos`` since ``written``
    and its new start: the length prefix for the new size, its correlation id and the
    rewritten head. Returns up to where ``buf`` is now in ``pieces``."""
    original = <bytes>head[0]
    rewritten = <bytes>head[1]
    if rewritten is original:
        return written  # nothing to change: the response goes out as it came
    cdef const char* p = PyBytes_AS_STRING(buf)
    cdef Py_ssize_t old = PyBytes_GET_SIZE(original), new = PyBytes_GET_SIZE(rewritten)
    cdef uint32_t size = <uint32_t>(read_int32(<const uint8_t*>p + pos) + new - old)
    if pos > written:
        pieces.append(PyBytes_FromStringAndSize(p + written, pos - written))
    start = PyBytes_FromStringAndSize(NULL, 8 + new)
    cdef uint8_t* out = <uint8_t*>PyBytes_AS_STRING(start)
    out[0] = size >> 24
    out[1] = (size >> 16) & 0xFF
    out[2] = (size >> 8) & 0xFF
    out[3] = size & 0xFF
    memcpy(out + 4, p + pos + 4, 4)  # the correlation id
    memcpy(out + 8, PyBytes_AS_STRING(rewritten), new)
    pieces.append(start)
    return pos + 8 + old
