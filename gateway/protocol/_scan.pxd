# cython: language_level=3
# The C types of _scan.py, which Cython compiles as it stands, and the C names its
# compiled build uses where the plain one binds Python's (_scan_names.py). The compiled
# connection reads (gateway/server/_lane.pyx) call the two scans without a Python call.

from libc.stdint cimport int32_t, int64_t, uint8_t

cimport cython

ctypedef const uint8_t* bytes_at
ctypedef const int32_t* program_at

from ._cwire cimport read_int16, read_int32
from ._inflight_entry cimport InFlightRequest
from ._tables cimport (
    Counts,
    PlainTable,
    count_request,
    count_response,
    keep_walk,
    now as clock,
)

cdef extern from *:
    # The answered entries off the table's front: one move of the rest, however many, and
    # no slice object (``del entries[:n]`` makes one each read).
    """
    #define gateway_drop_first(entries, n) PyList_SetSlice((entries), 0, (n), NULL)
    """
    int drop_first "gateway_drop_first"(list entries, Py_ssize_t n) except -1

cdef extern from *:
    # A replaced head's new start: the length prefix for the new size, the correlation id
    # at ``buf[pos + 4]`` and the rewritten head, in one allocation (``replace_head``).
    """
    static PyObject* gateway_head_start(
        int64_t size, PyObject* buf, Py_ssize_t pos, PyObject* rewritten
    ) {
        Py_ssize_t n = PyBytes_GET_SIZE(rewritten);
        PyObject* start = PyBytes_FromStringAndSize(NULL, 8 + n);
        if (start == NULL) return NULL;
        unsigned char* out = (unsigned char*) PyBytes_AS_STRING(start);
        uint32_t s = (uint32_t) size;
        out[0] = s >> 24; out[1] = (s >> 16) & 0xFF; out[2] = (s >> 8) & 0xFF; out[3] = s & 0xFF;
        memcpy(out + 4, PyBytes_AS_STRING(buf) + pos + 4, 4);
        memcpy(out + 8, PyBytes_AS_STRING(rewritten), n);
        return start;
    }
    """
    bytes head_start "gateway_head_start"(int64_t size, bytes buf, Py_ssize_t pos, bytes rewritten)

# const: _scan.py's one assignment of each becomes its C initialiser, a constant the C
# compiler folds into the tests that read it (a plain global is loaded at each).
cdef const int _PRODUCE
cdef const Py_ssize_t NOT_HERE, IMPOSSIBLE
cdef const int _W_SKIP, _W_BLOB, _W_STRUCT, _W_ARRAY_OF_ENTITIES, _W_ARRAY_OF_FIXED

# ``inline`` on a declaration (the body is _scan.py's, the one source) makes the C
# function ``static inline``: the C compiler, which keeps an out-of-line copy of each
# function declared here (the module exports them to cimporting modules), inlined none
# of these into the loops without it. Cython 3.1-3.3 warn "Declarations should not be
# declared inline" (cython/cython#1736) and compile it as asked; the ones marked are
# those the loops called out of line without it (bench/README.md has the cost).

@cython.locals(result=int64_t, shift=int, byte=uint8_t)
cdef (int64_t, Py_ssize_t) _uvarint(bytes_at buf, Py_ssize_t pos, Py_ssize_t end) noexcept nogil
@cython.locals(value=int64_t)
cdef inline (int64_t, Py_ssize_t) _length(
    bytes_at buf, Py_ssize_t pos, Py_ssize_t end, bint flexible, int width
) noexcept nogil
@cython.locals(length=int64_t)
cdef Py_ssize_t _skip_blob(
    bytes_at buf, Py_ssize_t pos, Py_ssize_t end, bint flexible, int width
) noexcept nogil
@cython.locals(count=int64_t, size=int64_t, _tag=int64_t, _i=int64_t)
cdef inline Py_ssize_t skip_tags(bytes_at buf, Py_ssize_t pos, Py_ssize_t end) noexcept nogil

cdef inline Py_ssize_t produce_acks_at(bytes_at buf, Py_ssize_t pos, Py_ssize_t end, int version) noexcept nogil

@cython.locals(
    flags=int32_t, flexible=bint, step=Py_ssize_t, stop=Py_ssize_t, element=Py_ssize_t,
    kind=int32_t, arg=int32_t, count=int64_t, _i=int64_t,
)
cdef Py_ssize_t walk_tail(
    program_at program, Py_ssize_t at, bytes_at buf, Py_ssize_t pos, Py_ssize_t end
) noexcept nogil
cdef inline bint tail_empty(program_at program, bytes_at buf, Py_ssize_t pos, Py_ssize_t end) noexcept nogil

cdef Py_ssize_t request_end(int64_t size, Py_ssize_t pos, int64_t max_frame_bytes) noexcept
cdef Py_ssize_t response_end(int64_t size, Py_ssize_t pos, int64_t max_frame_bytes) noexcept

cdef bint answers(InFlightRequest entry, int correlation_id) noexcept
@cython.locals(count=Py_ssize_t, entry=InFlightRequest)
cdef inline bint releases_local(list entries, Py_ssize_t after) except -1
cdef bint takes_answer(
    InFlightRequest entry, int correlation_id, list entries, Py_ssize_t index, Py_ssize_t count
) except -1

@cython.locals(old=Py_ssize_t, size=int64_t, original=bytes, rewritten=bytes, p=bytes_at)
cdef Py_ssize_t replace_head(
    head, bytes buf, Py_ssize_t pos, Py_ssize_t written, list pieces
) except -1

@cython.locals(kept=program_at)
cpdef Py_ssize_t tail_offset(int key, int version, program, bytes body) except? -2

@cython.locals(
    p=bytes_at, pos=Py_ssize_t, stop=Py_ssize_t, acks=Py_ssize_t, key=int,
    version=int, entry=InFlightRequest, now=double,
)
cpdef Py_ssize_t scan_requests(
    bytes buf,
    Py_ssize_t start,
    Py_ssize_t end,
    PlainTable table,
    list entries,
    Counts counts,
    int max_frame_bytes,
) except -1

@cython.locals(
    p=bytes_at, pos=Py_ssize_t, stop=Py_ssize_t, written=Py_ssize_t,
    answered=Py_ssize_t, count=Py_ssize_t, key=int, version=int, entry=InFlightRequest,
    program=program_at, now=double,
)
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
) except -1
