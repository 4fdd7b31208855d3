# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The scanner, compiled: pure functions over a read's bytes and the in-flight table.

The readers (``RequestReader``, ``ResponseReader``) call the scanner first on a read
that starts at a frame boundary, and handle only what it leaves. The scanner takes
the frames the gateway forwards untouched, the commonest by far, and stops at the
first frame that needs a decision: the readers then take that frame and the rest of
the read. It never fails and never says why it stopped; a frame it leaves is read
again, and judged, by the reader. Its contract, which the Python twin
(``gateway/protocol/_scan_py.py``) keeps too and tests/unit/test_scan.py compares:

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
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcmp, memcpy
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

cimport cython

from ._cwire cimport read_int16, read_int32, read_length, skip_blob, skip_tags

COMPILED = True

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
cdef double _bounds[BUCKETS]
for _i, _bound in enumerate(LATENCY_BUCKETS):
    _bounds[_i] = _bound


cdef inline double _now() noexcept nogil:
    # time.perf_counter's clock on Linux: entries of both languages compare.
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


@cython.freelist(64)
cdef class InFlightRequest:
    """A request whose response is awaited (or, when ``local`` is set, already made).

    ``request_bytes``/``response_bytes``: frame sizes, length prefix included (the
    request log). ``local``: a response the gateway made, released once every earlier
    upstream response went out. ``context``: an interceptor's note until the response.
    ``to_upstream`` False: answered here, never matched to an upstream response;
    ``expects_response`` False: an acks=0 produce, kept to recognise a broker that
    answers it (see ``InFlight``)."""


    def __init__(
        self,
        int api_key,
        int api_version,
        int correlation_id,
        bint to_upstream=True,
        bint expects_response=True,
    ):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.started = _now()
        self.to_upstream = to_upstream
        self.expects_response = expects_response


# -- walking a response to its top-level tagged section --------------------------------------

# Per api key, per version, the walk program of its responses. Programs follow from
# Kafka's schemas, not from a negotiation: each is made once and kept for the process.
cdef int32_t** _walks[KEYS]


cdef const int32_t* _keep_walk(int key, int version, program) except? NULL:
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


cdef Py_ssize_t _walk(
    const int32_t* program, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end
) noexcept nogil:
    """Where ``program`` (``tail_program``) ends over ``buf`` from ``pos``; -1 when the
    bytes do not walk within ``buf[:end]``. The steps of ``_walk._skip``, but a count
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
    cdef const int32_t* kept = _keep_walk(key, version, program)
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
    it cannot be read here (v0-v2, without transactional_id, included)."""
    cdef Py_ssize_t pos
    if version < 3:
        return 0
    # After key, version and correlation id: client_id, a nullable int16 string in every
    # header version; from v9 (header v2) tagged fields, and a compact transactional_id.
    pos = skip_blob(p, 8, size, False, 2)
    if pos >= 0 and version >= 9:
        pos = skip_tags(p, pos, size)
    if pos >= 0:
        pos = skip_blob(p, pos, size, version >= 9, 2)
    if pos < 0 or pos + 2 > size:
        return 0
    return read_int16(p + pos)


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
            if 0 <= key < KEYS and key != SASL_HANDSHAKE:
                self.head_low[key], self.head_high[key] = low, high
        self.heads = heads
        self.book = book
        for key, (low, high) in passthrough.items():
            if 0 <= key < KEYS and key != SASL_HANDSHAKE:
                self.low[key] = low
                self.high[key] = min(high, first_rewritten.get(key, 1 << 15) - 1)
        for (key, version), program in sorted(walks.items()):
            if not (0 <= key < KEYS and key != SASL_HANDSHAKE and 0 <= version < WALK_VERSIONS):
                continue
            if self.walk_low[key] > self.walk_high[key]:
                self.walk_low[key] = version
            elif version != self.walk_high[key] + 1:
                continue  # a gap: the scanner keeps to the first run of versions
            self.walk_high[key] = version
            _keep_walk(key, version, program)

    def plain(self, int key, int version):
        """Whether the scanner takes requests of this key and version."""
        return self._forwarded(key, version) or self._walk_of(key, version) != NULL or self._headed(key, version)

    def walked(self, int key, int version):
        return self._walk_of(key, version) != NULL

    def headed(self, int key, int version):
        return self._headed(key, version)

    cdef bint _forwarded(self, int key, int version) noexcept:
        return 0 <= key < KEYS and self.low[key] <= version <= self.high[key]

    cdef bint _headed(self, int key, int version) noexcept:
        return 0 <= key < KEYS and self.head_low[key] <= version <= self.head_high[key]

    cdef const int32_t* _walk_of(self, int key, int version) noexcept:
        if 0 <= key < KEYS and self.walk_low[key] <= version <= self.walk_high[key]:
            return _walks[key][version]
        return NULL

    cdef object _last_head(self, int key, int version, const uint8_t* frame, Py_ssize_t size):
        """The head last rewritten for (key, version) if ``frame`` (``size`` bytes)
        starts with it after its correlation id and it holds for the book now; else
        None."""
        head = self.heads.get((key, version))
        if head is None:
            return None
        book = head[2]
        if book is not self.book or book.generation != head[3]:
            return None
        original = <bytes>head[0]
        cdef Py_ssize_t length = PyBytes_GET_SIZE(original)
        if size - 8 < length or memcmp(frame + 8, PyBytes_AS_STRING(original), length):
            return None
        return head


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
                return &self._slots[i]
        slots = <Count*>realloc(self._slots, (self._used + 1) * sizeof(Count))
        if slots == NULL:
            raise MemoryError()
        self._slots = slots
        slot = &slots[self._used]
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
        while i < BUCKETS and _bounds[i] < elapsed:  # bisect_left, as ApiStats
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
    cdef double now = _now()  # one clock a read: its requests arrived together
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
        counts._request(key, version)
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
    cdef double now = _now()
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
        counts._response(key, version, now - entry.started)
        answered += 1
        if done is not None:
            done.append(entry)
        pos = stop
    if answered:
        del entries[:answered]  # one move of the rest, however many were answered
    if written > start and pos > written:
        pieces.append(PyBytes_FromStringAndSize(<const char*>p + written, pos - written))
    return pos - start


cdef bint _releases_local(list entries, Py_ssize_t after) except -1:
    """Whether answering the entry before ``after`` lets a local answer behind it go out
    (only acks=0 produces between them, which get no answer): the reader does that."""
    cdef Py_ssize_t i
    for i in range(after, len(entries)):
        entry = entries[i]
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
