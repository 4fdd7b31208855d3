# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled scanner's tables (see gateway/protocol/_scan.py): the table of what the
scanner takes (``PlainTable``) with the walk programs it keeps, and the scanner's
counts. Their Python twins are in gateway/protocol/_tables_py.py (C arrays and C counts
are no source plain Python can run); the rule they apply, which requests the scanner
may take, is one (``_scan.scanner_takes_key``), and so is the in-flight entry both
builds make (gateway/protocol/_inflight_entry.py).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcmp
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

cimport cython

from ._hot import scanner_takes_key

LATENCY_BUCKETS = tuple(LATENCY_BOUNDS[i] for i in range(BUCKETS))


cdef double now() noexcept nogil:
    # time.perf_counter's clock on Linux: entries of both languages compare.
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


# Per api key, per version, the walk program of its responses. Programs follow from
# Kafka's schemas, not from a negotiation: each is made once and kept for the process.
cdef int32_t** _walks[KEYS]


cdef const int32_t* keep_walk(int key, int version, program) except? NULL:
    cdef int32_t* kept
    cdef Py_ssize_t i
    if not (0 <= key < KEYS and 0 <= version < WALK_VERSIONS):
        raise ValueError(f"no walk is kept for api key {key} v{version}")
    if _walks[key] == NULL:
        _walks[key] = <int32_t**>calloc(WALK_VERSIONS, sizeof(int32_t*))
        if _walks[key] == NULL:
            raise MemoryError()
    if _walks[key][version] == NULL:
        kept = <int32_t*>malloc(len(program) * sizeof(int32_t))
        if kept == NULL:
            raise MemoryError()
        for i in range(len(program)):
            kept[i] = program[i]
        _walks[key][version] = kept
    return _walks[key][version]


@cython.final
cdef class PlainTable:
    """Per API key, the versions the scanner takes (see the module docstring): requests
    forwarded untouched whose responses are either not rewritten, walked or headed.
    One per negotiation, shared by its connections (``Gateway.negotiated``)."""


    def __init__(self, passthrough, first_rewritten, walks, headed, dict heads, book):
        """``passthrough``: api key → (min, max) forwarded untouched; ``first_rewritten``:
        api key → the first version whose response the gateway rewrites; ``walks``:
        (api key, version) → the walk program of the forwarded versions whose responses
        are rewritten only when their top-level tagged section holds something;
        ``headed``: api key → (min, max) whose responses are rewritten in their head
        only, ``heads`` the last head rewritten of each, ``book`` the AddressBook."""
        cdef int key
        for key in range(KEYS):
            self.low[key], self.high[key] = 1, 0
            self.walk_low[key], self.walk_high[key] = 1, 0
            self.head_low[key], self.head_high[key] = 1, 0
        for key, (low, high) in headed.items():
            if 0 <= key < KEYS and scanner_takes_key(key):
                self.head_low[key], self.head_high[key] = low, high
        self.heads = heads
        self.book = book
        for key, (low, high) in passthrough.items():
            if 0 <= key < KEYS and scanner_takes_key(key):
                self.low[key] = low
                self.high[key] = min(high, first_rewritten.get(key, 1 << 15) - 1)
        for (key, version), program in sorted(walks.items()):
            if not (0 <= key < KEYS and scanner_takes_key(key) and 0 <= version < WALK_VERSIONS):
                continue
            if self.walk_low[key] > self.walk_high[key]:
                self.walk_low[key] = version
            elif version != self.walk_high[key] + 1:
                continue  # a gap: the scanner keeps to the first run of versions
            self.walk_high[key] = version
            keep_walk(key, version, program)

    def plain(self, int key, int version):
        """Whether the scanner takes requests of this key and version."""
        return self._takes(key, version)

    def walked(self, int key, int version):
        return self._walk_of(key, version) != NULL

    def headed(self, int key, int version):
        return self._headed(key, version)

    cdef bint _takes(self, int key, int version) noexcept:
        return (
            self._forwarded(key, version)
            or self._walk_of(key, version) != NULL
            or self._headed(key, version)
        )

    cdef bint _forwarded(self, int key, int version) noexcept:
        return 0 <= key < KEYS and self.low[key] <= version <= self.high[key]

    cdef bint _headed(self, int key, int version) noexcept:
        return 0 <= key < KEYS and self.head_low[key] <= version <= self.head_high[key]

    cdef const int32_t* _walk_of(self, int key, int version) noexcept:
        if 0 <= key < KEYS and self.walk_low[key] <= version <= self.walk_high[key]:
            return _walks[key][version]
        return NULL

    cdef object _last_head(
        self, int key, int version, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end
    ):
        """The head last rewritten for (key, version) if the frame at ``buf[pos]``
        (to ``end``) starts with it after its correlation id and it holds for the book
        now; else None."""
        cdef tuple pair = self._head_key
        if pair is None or pair[0] != key or pair[1] != version:
            pair = self._head_key = (key, version)
        head = self.heads.get(pair)
        if head is None:
            return None
        cdef tuple fields = <tuple>head  # a LastHead: its fields without a sequence call
        book = fields[2]
        if book is not self.book or book.generation != fields[3]:
            return None
        original = <bytes>fields[0]
        cdef Py_ssize_t length = PyBytes_GET_SIZE(original)
        if end - pos - 8 < length or memcmp(buf + pos + 8, PyBytes_AS_STRING(original), length):
            return None
        return head


@cython.final
cdef class Counts:
    """What the scanner counted since the last ``fold`` into an ``ApiStats``: requests
    and responses by (key, version), latencies in ``LATENCY_BUCKETS``. Grown one pair
    at a time from none: most connections use one or two pairs, and 10,000 idle
    connections each holding room for 32 were 49 MB."""


    def __dealloc__(self):
        free(self._slots)

    cdef Count* _slot(self, int key, int version) except NULL:
        cdef int i
        for i in range(self._used):
            if self._slots[i].key == key and self._slots[i].version == version:
                self._last = i
                return &self._slots[i]
        slots = <Count*>realloc(self._slots, (self._used + 1) * sizeof(Count))
        if slots == NULL:
            raise MemoryError()
        self._slots = slots
        slot = &slots[self._used]
        self._last = self._used
        self._used += 1
        slot.key, slot.version = key, version
        slot.requests = slot.responses = 0
        slot.latency = 0.0
        for i in range(BUCKETS + 1):
            slot.buckets[i] = 0
        return slot

    cdef int _request(self, int key, int version) except -1:
        self._slot(key, version).requests += 1
        self.frames += 1
        return 0

    cdef int _response(self, int key, int version, double elapsed) except -1:
        cdef Count* slot = self._slot(key, version)
        cdef int i = 0
        slot.responses += 1
        slot.latency += elapsed
        while i < BUCKETS and LATENCY_BOUNDS[i] < elapsed:  # bisect_left, as ApiStats
            i += 1
        slot.buckets[i] += 1
        return 0

    def request(self, int key, int version):
        self._request(key, version)

    def response(self, int key, int version, double elapsed):
        self._response(key, version, elapsed)

    def fold(self, stats):
        """Add the counts to ``stats`` (an ApiStats) and start from none."""
        cdef int i, b
        cdef Count* slot
        requests, responses, latency = stats.requests, stats.responses, stats.latency
        for i in range(self._used):
            slot = &self._slots[i]
            key = (slot.key, slot.version)
            if slot.requests:
                requests[key] = requests.get(key, 0) + slot.requests
            if slot.responses:
                responses[key] = responses.get(key, 0) + slot.responses
                histogram = latency.get(slot.key)
                if histogram is None:
                    histogram = latency[slot.key] = [0.0] * (BUCKETS + 2)
                histogram[0] += slot.latency
                for b in range(BUCKETS + 1):
                    if slot.buckets[b]:
                        histogram[1 + b] += slot.buckets[b]
        self._used = 0
        free(self._slots)
        self._slots = NULL
