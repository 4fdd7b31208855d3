# cython: language_level=3
# The compiled scanner's tables (_tables.pyx), for the scanner (_scan.pyx). See there.

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t

cdef enum:
    # The keys a PlainTable covers; requests of other keys are left to the reader.
    KEYS = 128
    # The versions a walk program may be kept for (Kafka's highest today is under 20).
    WALK_VERSIONS = 64
    SASL_HANDSHAKE = 17
    # Latency buckets as gateway.protocol._stats.LATENCY_BUCKETS (the tests compare).
    BUCKETS = 14


cdef double now() noexcept nogil
cdef const int32_t* keep_walk(int key, int version, program) except? NULL


cdef class InFlightRequest:
    cdef public int api_key, api_version, correlation_id
    cdef public double started
    cdef public Py_ssize_t request_bytes, response_bytes
    cdef public object local, context
    cdef public bint to_upstream, expects_response


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

    cdef bint _forwarded(self, int key, int version) noexcept
    cdef bint _headed(self, int key, int version) noexcept
    cdef const int32_t* _walk_of(self, int key, int version) noexcept
    cdef object _last_head(self, int key, int version, const uint8_t* frame, Py_ssize_t size)


cdef struct Count:
    int16_t key
    int16_t version
    int64_t requests
    int64_t responses
    double latency
    int64_t buckets[BUCKETS + 1]


cdef class Counts:
    cdef Count* _slots
    cdef int _used
    # Requests taken, ever (the connection registry's count).
    cdef readonly int64_t frames

    cdef Count* _slot(self, int key, int version) except NULL
    cdef int _request(self, int key, int version) except -1
    cdef int _response(self, int key, int version, double elapsed) except -1
