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
from libc.stdint cimport int32_t, uint8_t, uint32_t
from libc.string cimport memcpy

from ._cwire cimport read_int16, read_int32
from ._hotpath cimport (
    produce_acks_at,
    request_end,
    response_end,
    tail_empty,
    takes_answer,
    walk,
)
from ._inflight_entry cimport InFlightRequest
from ._tables cimport (
    Counts,
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
    PRODUCE = 0


def tail_offset(int key, int version, program, bytes body):
    """Where the walk of ``body``, a response body of ``key``/``version`` whose walk is
    ``program`` (``tail_program``), ends, or -1 (the tests hold it to ``tags_offset``)."""
    cdef const int32_t* kept = keep_walk(key, version, program)
    return walk(kept, 0, <const uint8_t*>PyBytes_AS_STRING(body), 0, len(body))


# -- the two scans ------------------------------------------------------------------------------

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
    cdef Py_ssize_t pos = start, stop, acks
    cdef int key, version
    cdef InFlightRequest entry
    cdef double now = clock()  # one clock a read: its requests arrived together
    if end > PyBytes_GET_SIZE(buf):
        end = PyBytes_GET_SIZE(buf)
    while end - pos >= 12:
        stop = request_end(read_int32(p + pos), pos, max_frame_bytes)
        if stop < 0 or stop > end:
            break
        key = read_int16(p + pos + 4)
        version = read_int16(p + pos + 6)
        if not (
            table._forwarded(key, version)
            or table._walk_of(key, version) != NULL
            or table._headed(key, version)
        ):
            break
        if key == PRODUCE:  # acks=0 gets no answer: the reader keeps it apart
            acks = produce_acks_at(p, pos + 4, stop, version)
            if acks < 0 or read_int16(p + acks) == 0:
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
    cdef const int32_t* program
    cdef int key, version
    cdef double now = clock()
    if end > PyBytes_GET_SIZE(buf):
        end = PyBytes_GET_SIZE(buf)
    cdef Py_ssize_t answered = 0, count = len(entries)
    while end - pos >= 8 and answered < count:
        stop = response_end(read_int32(p + pos), pos, max_frame_bytes)
        if stop < 0 or stop > end:
            break
        first = entries[answered]
        if type(first) is not InFlightRequest:
            break
        if not takes_answer(entries, answered, count, read_int32(p + pos + 4)):
            break
        entry = <InFlightRequest>first
        key, version = entry.api_key, entry.api_version
        if not table._forwarded(key, version):
            program = table._walk_of(key, version)
            if program != NULL:
                if not tail_empty(program, p, pos + 8, stop):
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
