# cython: language_level=3
# The compiled scanner's tables (_tables.pyx), for the scanner (_scan.py, compiled).

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t

cimport cython

cdef enum:
    # The keys a PlainTable covers; requests of other keys are left to the reader.
    KEYS = 128
    # The versions a walk program may be kept for (Kafka's highest today is under 20).
    WALK_VERSIONS = 64
    # Latency buckets as gateway.protocol._stats.LATENCY_BUCKETS (the tests compare).
    BUCKETS = 14

cdef extern from *:
    # The latency buckets' upper bounds (LATENCY_BUCKETS is made from them), in C so the
    # scanner counts a response inline.
    """
    static const double gateway_latency_bounds[14] = {
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0
    };
    """
    const double LATENCY_BOUNDS "gateway_latency_bounds"[BUCKETS]


cdef double now() noexcept nogil
cdef const int32_t* keep_walk(int key, int version, program) except? NULL


# Final: the scanner calls its methods directly, none through a table of methods.
@cython.final
cdef class PlainTable:
    cdef int16_t low[KEYS]
    cdef int16_t high[KEYS]
    cdef int16_t walk_low[KEYS]
    cdef int16_t walk_high[KEYS]
    cdef int16_t head_low[KEYS]
    cdef int16_t head_high[KEYS]
    # (api key, version) → the last head rewritten (addresses.LastHead), shared by all,
    # and the gateway's AddressBook: a head holds for the book it was rewritten for.
    cdef readonly dict heads
    cdef readonly object book
    # The (key, version) last looked up in ``heads``, kept: no tuple made per answer.
    cdef tuple _head_key

    cdef bint _takes(self, int key, int version) noexcept
    cdef bint _forwarded(self, int key, int version) noexcept
    cdef bint _headed(self, int key, int version) noexcept
    cdef const int32_t* _walk_of(self, int key, int version) noexcept
    cdef object _last_head(
        self, int key, int version, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end
    )


cdef struct Count:
    int16_t key
    int16_t version
    int64_t requests
    int64_t responses
    double latency
    int64_t buckets[BUCKETS + 1]


@cython.final
cdef class Counts:
    cdef Count* _slots
    cdef int _used
    # The slot counted last: a connection's next request is most often of the same pair.
    cdef int _last
    # Requests taken, ever (the connection registry's count).
    cdef readonly int64_t frames

    cdef Count* _slot(self, int key, int version) except NULL
    cdef int _request(self, int key, int version) except -1
    cdef int _response(self, int key, int version, double elapsed) except -1


# What the scanner counts per frame, inline in it: the slot counted last needs no call.
cdef inline int count_request(Counts counts, int key, int version) except -1:
    cdef Count* slot
    if counts._last < counts._used:
        slot = &counts._slots[counts._last]
        if slot.key == key and slot.version == version:
            slot.requests += 1
            counts.frames += 1
            return 0
    return counts._request(key, version)


cdef inline int count_response(Counts counts, int key, int version, double elapsed) except -1:
    cdef Count* slot
    cdef int i = 0
    if counts._last < counts._used:
        slot = &counts._slots[counts._last]
        if slot.key == key and slot.version == version:
            slot.responses += 1
            slot.latency += elapsed
            while i < BUCKETS and LATENCY_BOUNDS[i] < elapsed:  # bisect_left, as ApiStats
                i += 1
            slot.buckets[i] += 1
            return 0
    return counts._response(key, version, elapsed)
