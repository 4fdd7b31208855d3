# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled lane: a connection's reads of requests and responses it forwards untouched.

A forwarded request costs haproxy about a microsecond and a half of CPU; the Python path
(``ClientConnection.data_received`` through ``RequestReader.feed`` and back out, then the
same for its response) costs two to four times that, and most of it is the interpreter
calling and counting, not the work (bench/README.md, "A compiled lane"). This module does
that work in C for the reads it can take whole, and hands every other read to the Python
path, which stays the definition of what the gateway does:

* a read of the client's that starts at a frame boundary is taken here up to the first
  frame that is not a *plain* request: one whose key and version pass through untouched
  and whose response is either not rewritten, *walked* or *headed* (``PlainTable``),
  which is not a SaslHandshake, and, for a Produce, has acks other than 0. What is left
  goes to ``data_received``;
* a read of the upstream's is taken here while every outstanding request is in the lane
  (the Python in-flight table is empty), up to the first response that does not answer
  the lane's oldest request, or, for a walked request, whose top-level tagged section is
  not empty, or, for a headed one, whose head the lane does not know. What is left goes
  to ``upstream_data``.

Walked responses are Produce v10+ and Fetch v16+: they are rewritten only when their
top-level tagged section carries KIP-951's NodeEndpoints, which brokers send only when a
leader moved. The lane walks them to that section with ``gateway.protocol.tail_program``
(the Python walk's steps as integers, run in C by ``_walk``) and forwards the ones whose
section is empty, as the Python path would (unchanged); any doubt (a section that holds
something, bytes that do not walk) leaves the response to the Python path.

Headed responses are Metadata's: their broker addresses are all in the head (the
response header and the body up to the end of the brokers array), which a cluster's
brokers make the same in nearly every response. Each time the Python path rewrites a
head it records it, as it came and as it went out (``addresses.LAST_HEADS``); a response
that starts with the recorded head after its correlation id has exactly that head, and
while the address book's generation holds, the lane sends the recorded rewrite with the
length prefix the new size needs, and the rest of the response as it came. Any other
head (the first, brokers that changed, a book that moved on) leaves the response to the
Python path, which rewrites it and records it for the next.

The lane keeps its requests in a ring of C structs, in order, behind those of the Python
in-flight table (``InFlight``): a request the lane took is always newer than every
request in the table. Before the Python path touches the table it calls ``lane_spill``,
which appends the ring's requests to it as ``InFlightRequest`` entries, in order, so the
Python path sees every request as if it had read them all itself; afterwards
``lane_absorb`` takes the table's requests back when all of them are plain. Counts go to
C counters, folded into the connection's ``ApiStats`` when its metrics are (``lane_fold``).

``gateway/server/_lane_py.py`` is the same interface without a lane (every read takes the
Python path): what runs where this module was not compiled.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcmp, memcpy, memmove
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

COMPILED = True

# The most one socket read takes (see gateway/server/proxy.py, READ_BYTES).
READ_BYTES = 120_000
# One receive buffer for every connection of the process (see proxy.py, _RECV).
cdef bytearray _recv_array = bytearray(READ_BYTES)
RECV = memoryview(_recv_array)
cdef char* _recv = _recv_array  # never resized: the pointer stays valid

cdef enum:
    # The keys a PlainTable covers; requests of other keys take the Python path.
    KEYS = 128
    # The versions a walk program may be kept for (Kafka's highest today is under 20).
    WALK_VERSIONS = 64
    # The kinds of a walk program's steps, as gateway.protocol._walk's (the tests compare).
    W_SKIP = 0
    W_BLOB = 1
    W_STRUCT = 3
    W_ARRAY_OF_ENTITIES = 4
    W_ARRAY_OF_FIXED = 5
    W_ARRAY_OF_BLOBS = 6
    PRODUCE = 0
    SASL_HANDSHAKE = 17
    # Latency buckets as gateway.protocol._stats.LATENCY_BUCKETS (the tests compare).
    BUCKETS = 14
    # Past this many distinct (key, version) pairs since the last fold, counts are
    # folded into the Python ApiStats at once (a client uses a handful).
    COUNT_SLOTS = 32
    # The most requests the ring holds; past that a request takes the Python path.
    RING_MAX = 65536

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
cdef double _bounds[BUCKETS]
for _i, _bound in enumerate(LATENCY_BUCKETS):
    _bounds[_i] = _bound


cdef struct Entry:
    int16_t key
    int16_t version
    int32_t correlation_id
    int32_t size
    bint headed  # a request whose response's head the lane may replace (Metadata)
    double started
    const int32_t* walk  # the response's walk program, for a walked request; else NULL


cdef struct Count:
    int16_t key
    int16_t version
    int64_t requests
    int64_t responses
    double latency
    int64_t buckets[BUCKETS + 1]


cdef inline double _now() noexcept nogil:
    # time.perf_counter's clock on Linux, so spilled entries' ``started`` compare.
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef inline int32_t _int32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int16_t _int16(const uint8_t* p) noexcept nogil:
    return <int16_t>((p[0] << 8) | p[1])


cdef inline Py_ssize_t _uvarint(const uint8_t* p, Py_ssize_t pos, Py_ssize_t size, int64_t* value) noexcept nogil:
    """Read an unsigned varint at ``pos``; return the position after it, or -1."""
    cdef int64_t result = 0
    cdef int shift = 0
    while pos < size and shift < 35:
        result |= <int64_t>(p[pos] & 0x7F) << shift
        pos += 1
        if not p[pos - 1] & 0x80:
            value[0] = result
            return pos
        shift += 7
    return -1


cdef inline Py_ssize_t _frame_end(
    const uint8_t* buf, Py_ssize_t pos, Py_ssize_t n, int32_t minimum, int32_t maximum
) noexcept nogil:
    """Where the frame at ``pos`` ends, if its size is within bounds and it is all in
    ``buf[:n]``; else -1 (the Python path then takes it, and says why if it is bad)."""
    cdef int32_t size = _int32(buf + pos)
    if size < minimum or size > maximum or pos + 4 + size > n:
        return -1
    return pos + 4 + size


# -- walking a response to its top-level tagged section --------------------------------------

# Per api key, per version, the walk program of its responses (see PlainTable). Programs
# follow from Kafka's schemas, not from a negotiation: each is made once, kept for the
# process (a few hundred bytes each, for a handful of versions), and entries point at them.
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


cdef Py_ssize_t _length(
    const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, bint flexible, int width, int64_t* value
) noexcept nogil:
    """A length or count at ``pos`` (compact, or a classic int16/int32 of ``width``);
    the position after it, or -1."""
    if flexible:
        pos = _uvarint(buf, pos, end, value)
        value[0] -= 1
        return pos
    if pos + width > end:
        return -1
    value[0] = _int16(buf + pos) if width == 2 else _int32(buf + pos)
    return pos + width


cdef inline Py_ssize_t _skip_blob(
    const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, bint flexible, int width
) noexcept nogil:
    """The position after the string, bytes or records at ``pos``, or -1."""
    cdef int64_t length
    pos = _length(buf, pos, end, flexible, width, &length)
    if pos < 0 or length < -1 or length > end - pos:
        return -1
    return pos + length if length > 0 else pos


cdef Py_ssize_t _skip_tags(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """The position after the tagged section at ``pos``, or -1."""
    cdef int64_t count, value
    cdef int64_t i
    pos = _uvarint(buf, pos, end, &count)
    if pos < 0 or count > end - pos:
        return -1
    for i in range(count):
        pos = _uvarint(buf, pos, end, &value)  # tag
        if pos < 0:
            return -1
        pos = _uvarint(buf, pos, end, &value)  # size
        if pos < 0 or value > end - pos:
            return -1
        pos += value
    return pos


# -- a Produce request's acks (acks=0 takes the Python path) ---------------------------------

cdef int _produce_acks(const uint8_t* p, Py_ssize_t size, int version) noexcept nogil:
    """acks of a whole Produce request (``p`` at its api key, ``size`` bytes), or 0 when it
    cannot be read here (then the Python path reads it, and says why if it is bad).
    v3 on: v0-v2 have no transactional_id, and take the Python path."""
    cdef Py_ssize_t pos
    if version < 3:
        return 0
    # After key, version and correlation id: client_id, a nullable int16 string in every
    # header version; from v9 (header v2) tagged fields, and the body's nullable
    # transactional_id compact.
    pos = _skip_blob(p, 8, size, False, 2)
    if pos >= 0 and version >= 9:
        pos = _skip_tags(p, pos, size)
    if pos >= 0:
        pos = _skip_blob(p, pos, size, version >= 9, 2)
    if pos < 0 or pos + 2 > size:
        return 0
    return _int16(p + pos)


cdef Py_ssize_t _walk(
    const int32_t* program, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end
) noexcept nogil:
    """Where ``program`` (see ``gateway.protocol.tail_program``) ends over ``buf`` from
    ``pos``; -1 when the bytes do not walk within ``buf[:end]``.

    The Python walk's steps, with one difference that only ever sends a response to the
    Python path: a count that cannot fit in what is left (each item takes a byte at
    least) is refused here at once, so a claimed count costs nothing.
    """
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
            pos = _skip_blob(buf, pos, end, flexible, arg)
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
        pos = _length(buf, pos, end, flexible, 4, &count)
        if pos < 0 or count < -1 or count > end - pos:
            return -1
        if kind == W_ARRAY_OF_FIXED:
            if count > 0:
                pos += count * arg
            continue
        for i in range(count):
            if kind == W_ARRAY_OF_ENTITIES:
                pos = _walk(element, buf, pos, end)
            else:  # W_ARRAY_OF_BLOBS
                pos = _skip_blob(buf, pos, end, flexible, arg)
            if pos < 0:
                return -1
    if program[0] & 2 and flexible:
        if pos >= end:
            return -1
        pos = _skip_tags(buf, pos, end)
    if pos > end:
        return -1
    return pos


cdef bint _tail_empty(
    const int32_t* program, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end
) noexcept nogil:
    """Whether the response from ``pos`` (just after its correlation id) to ``end`` is a
    response header v1 and a body whose top-level tagged section, its last byte, is
    empty: then nothing in it is rewritten."""
    pos = _skip_tags(buf, pos, end)
    if pos < 0:
        return False
    pos = _walk(program, buf, pos, end)
    return pos == end - 1 and buf[pos] == 0


def tail_offset(int key, int version, program, bytes body):
    """Where the C walk of ``body``, a response body of ``key``/``version`` whose walk is
    ``program`` (``tail_program``), ends, or -1; for the tests, which hold it to the
    Python walk (``tags_offset``)."""
    cdef const int32_t* kept = _keep_walk(key, version, program)
    return _walk(kept, <const uint8_t*>PyBytes_AS_STRING(body), 0, len(body))


cdef class PlainTable:
    """Per API key, the versions whose requests pass through untouched and whose
    responses are either not rewritten, walked or headed (see the module docstring):
    what the lane may take. One per negotiation, shared by its connections (see
    Gateway.negotiated)."""

    cdef int16_t low[KEYS]
    cdef int16_t high[KEYS]
    # The versions whose responses are walked (see the module docstring).
    cdef int16_t walk_low[KEYS]
    cdef int16_t walk_high[KEYS]
    # The versions whose responses' heads the lane may replace (see the module docstring).
    cdef int16_t head_low[KEYS]
    cdef int16_t head_high[KEYS]
    # (api key, version) → the last head rewritten (addresses.LastHead), shared by all,
    # and the gateway's AddressBook: a head holds for the book it was rewritten for.
    cdef dict heads
    cdef object book

    def __init__(self, passthrough, first_rewritten, walks, headed, dict heads, book):
        """``passthrough``: api key → (min, max) forwarded untouched; ``first_rewritten``:
        api key → the first version whose response the gateway rewrites; ``walks``:
        (api key, version) → the walk program of the forwarded versions whose responses
        are rewritten only when their top-level tagged section holds something
        (``dispatch.lane_walks``); ``headed``: api key → (min, max) forwarded whose
        responses are rewritten in their head only (``dispatch.lane_heads``),
        ``heads`` the last head rewritten of each (``dispatch.LAST_HEADS``), and
        ``book`` the gateway's AddressBook (its router)."""
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
                continue  # a gap: the lane keeps to the first run of versions
            self.walk_high[key] = version
            _keep_walk(key, version, program)

    def plain(self, int key, int version):
        """Whether the lane may take requests of this key and version."""
        return (
            self._plain(key, version)
            or self._walk_of(key, version) != NULL
            or self._headed(key, version)
        )

    def walked(self, int key, int version):
        """Whether the lane walks their responses (see the module docstring)."""
        return self._walk_of(key, version) != NULL

    def headed(self, int key, int version):
        """Whether the lane may replace their responses' heads (see the module docstring)."""
        return self._headed(key, version)

    cdef inline bint _plain(self, int key, int version) noexcept:
        return 0 <= key < KEYS and self.low[key] <= version <= self.high[key]

    cdef inline bint _headed(self, int key, int version) noexcept:
        return 0 <= key < KEYS and self.head_low[key] <= version <= self.head_high[key]

    cdef inline const int32_t* _walk_of(self, int key, int version) noexcept:
        if 0 <= key < KEYS and self.walk_low[key] <= version <= self.walk_high[key]:
            return _walks[key][version]
        return NULL


cdef class Lane:
    """Base of ``ClientConnection``: its reads, the lane's ring, and what both paths share
    (the transports, counters and flags the Python path keeps up to date)."""

    cdef public object client, upstream, inflight, requests, responses, limits
    cdef public PlainTable lane_table
    # Bytes of requests from, and responses to, the client; requests the lane took.
    cdef public int64_t bytes_in, bytes_out, lane_frames
    # Bytes counted against queued_max_request_bytes (see ConnectionLimits.charge).
    cdef public int64_t charged
    cdef public int max_frame_bytes
    cdef public bint budget_on, draining
    # Whether the lane may take the next read of each side (set by the Python path,
    # ``ClientConnection._lane_state``; the lane's own reads never invalidate them).
    cdef public bint lane_requests, lane_responses
    # The request log's sampling (RequestLog.sampled), or None when there is no request
    # log: a sampled answer the lane forwards is logged through ``log_answer``.
    cdef public object log_sampled
    # What a read that replaced a head writes, in order (see ``_replace_head``).
    cdef list _pieces
    cdef Entry* _ring
    cdef int _first, _count, _capacity
    cdef Count* _counts
    cdef int _slots, _slot_capacity

    def __dealloc__(self):
        free(self._ring)
        free(self._counts)

    # -- the transport's calls -----------------------------------------------------------
    def get_buffer(self, Py_ssize_t sizehint):
        return RECV

    def buffer_updated(self, Py_ssize_t nbytes):
        if nbytes == READ_BYTES:
            self.read_filled_client()
        data = PyBytes_FromStringAndSize(_recv, nbytes)
        cdef Py_ssize_t taken = 0
        if self.lane_requests:
            taken = self._take_requests(<const uint8_t*>PyBytes_AS_STRING(data), nbytes)
        if taken == nbytes:
            self.upstream.write(data)
            self.bytes_in += nbytes
            if self.budget_on:
                self._recharge()
            return
        if taken:
            self.upstream.write(PyBytes_FromStringAndSize(PyBytes_AS_STRING(data), taken))
            self.bytes_in += taken
            data = PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + taken, nbytes - taken)
        self.data_received(data)

    cdef upstream_read(self, Py_ssize_t nbytes):
        data = PyBytes_FromStringAndSize(_recv, nbytes)
        cdef const char* read = PyBytes_AS_STRING(data)
        cdef Py_ssize_t taken = 0, written = 0
        client = self.client
        if self.lane_responses and self._count and client is not None:
            taken = self._take_responses(<const uint8_t*>read, nbytes, &written)
            if not self._count:
                self._release()
        if written:
            # A head was replaced: what the lane took goes out in pieces, one writev.
            pieces = self._pieces
            self._pieces = None
            if taken > written:
                pieces.append(PyBytes_FromStringAndSize(read + written, taken - written))
            client.writelines(pieces)
        elif taken == nbytes:
            client.write(data)
        elif taken:
            client.write(PyBytes_FromStringAndSize(read, taken))
        self.bytes_out += taken
        if taken == nbytes:
            if self.draining and not self._count:
                self.close()
            elif self.budget_on:
                self._recharge()
            return
        if taken:
            data = PyBytes_FromStringAndSize(read + taken, nbytes - taken)
        self.upstream_data(data)

    # -- the lane's frames -----------------------------------------------------------------
    cdef Py_ssize_t _take_requests(self, const uint8_t* buf, Py_ssize_t n):
        """Record the plain whole requests at the start of ``buf``; return their bytes."""
        cdef Py_ssize_t pos = 0, end
        cdef int key, version
        cdef const int32_t* walk
        cdef bint headed
        cdef PlainTable table = self.lane_table
        cdef double now = _now()  # one clock a read: its requests arrived together
        while n - pos >= 12:
            end = _frame_end(buf, pos, n, 8, self.max_frame_bytes)
            if end < 0:
                break
            key = _int16(buf + pos + 4)
            version = _int16(buf + pos + 6)
            walk = NULL
            headed = False
            if not table._plain(key, version):
                walk = table._walk_of(key, version)
                if walk == NULL:
                    headed = table._headed(key, version)
                    if not headed:
                        break
            if key == PRODUCE and _produce_acks(buf + pos + 4, end - pos - 4, version) == 0:
                break
            if not self._push(key, version, _int32(buf + pos + 8), end - pos, now, walk, headed):
                break
            self._count_request(key, version)
            pos = end
        return pos

    cdef Py_ssize_t _take_responses(self, const uint8_t* buf, Py_ssize_t n, Py_ssize_t* written):
        """Forward the whole responses at the start of ``buf`` that answer the ring's
        requests in order; return their bytes. Where the lane replaces a response's
        head, what came before it and the new head go to ``_pieces``, and ``written``
        says up to where ``buf`` is in them (see ``_replace_head``)."""
        cdef Py_ssize_t pos = 0, end
        cdef Entry* entry
        cdef Entry logged
        cdef double now = _now()
        while self._count and n - pos >= 8:
            end = _frame_end(buf, pos, n, 4, self.max_frame_bytes)
            if end < 0:
                break
            entry = &self._ring[self._first]
            if _int32(buf + pos + 4) != entry.correlation_id:
                break
            if entry.walk != NULL and not _tail_empty(entry.walk, buf, pos + 8, end):
                break
            if entry.headed:
                head = self._last_head(entry.key, entry.version, buf + pos, end - pos)
                if head is None:
                    break
                self._replace_head(head, buf, pos, written)
            self._count_response(entry.key, entry.version, now - entry.started)
            if self.log_sampled is not None and self.log_sampled():
                logged = entry[0]  # a copy: the ring may move while Python runs
                self._pop()
                self.log_answer(
                    logged.key,
                    logged.version,
                    logged.correlation_id,
                    logged.started,
                    logged.size,
                    end - pos,
                )
            else:
                self._pop()
            pos = end
        return pos

    cdef object _last_head(self, int key, int version, const uint8_t* frame, Py_ssize_t size):
        """The head the Python path last rewrote for (key, version) (addresses.LastHead),
        if ``frame`` (``size`` bytes) starts with it after its correlation id and it
        holds for the gateway's book at its generation now; else None."""
        cdef PlainTable table = self.lane_table
        head = table.heads.get((key, version))
        if head is None:
            return None
        book = head[2]
        if book is not table.book or book.generation != head[3]:
            return None
        original = <bytes>head[0]
        cdef Py_ssize_t length = PyBytes_GET_SIZE(original)
        if size - 8 < length or memcmp(frame + 8, PyBytes_AS_STRING(original), length):
            return None
        return head

    cdef int _replace_head(self, head, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t* written) except -1:
        """Put in ``_pieces`` what comes before the response at ``pos`` and its new start:
        the length prefix for the new size, its correlation id and the rewritten head.
        The rest of the response goes out as it came, with what follows it."""
        original = <bytes>head[0]
        rewritten = <bytes>head[1]
        if rewritten is original:
            return 0  # nothing to change: the response goes out as it came
        cdef Py_ssize_t old = PyBytes_GET_SIZE(original), new = PyBytes_GET_SIZE(rewritten)
        cdef uint32_t size = <uint32_t>(_int32(buf + pos) + new - old)
        if not written[0]:
            self._pieces = []
        if pos > written[0]:
            self._pieces.append(
                PyBytes_FromStringAndSize(<const char*>buf + written[0], pos - written[0])
            )
        start = PyBytes_FromStringAndSize(NULL, 8 + new)
        cdef uint8_t* out = <uint8_t*>PyBytes_AS_STRING(start)
        out[0] = size >> 24
        out[1] = (size >> 16) & 0xFF
        out[2] = (size >> 8) & 0xFF
        out[3] = size & 0xFF
        memcpy(out + 4, buf + pos + 4, 4)  # the correlation id
        memcpy(out + 8, PyBytes_AS_STRING(rewritten), new)
        self._pieces.append(start)
        written[0] = pos + 8 + old
        return 0

    cdef inline void _pop(self) noexcept:
        """Drop the ring's oldest request."""
        self._first += 1
        if self._first == self._capacity:
            self._first = 0
        self._count -= 1

    cdef bint _push(
        self,
        int key,
        int version,
        int32_t correlation_id,
        int32_t size,
        double started,
        const int32_t* walk,
        bint headed,
    ) except -1:
        cdef Entry* entry
        if self._count == self._capacity and not self._grow():
            return False
        entry = &self._ring[(self._first + self._count) % self._capacity]
        entry.key = key
        entry.version = version
        entry.correlation_id = correlation_id
        entry.size = size
        entry.started = started
        entry.walk = walk
        entry.headed = headed
        self._count += 1
        self.lane_frames += 1
        return True

    cdef bint _grow(self) except -1:
        cdef int capacity = self._capacity * 2 if self._capacity else 8
        if capacity > RING_MAX:
            return False
        ring = <Entry*>realloc(self._ring, capacity * sizeof(Entry))
        if ring == NULL:
            raise MemoryError()
        # Unwrap: the entries that wrapped around go after the old end.
        if self._first + self._count > self._capacity:
            wrapped = self._first + self._count - self._capacity
            memmove(ring + self._capacity, ring, wrapped * sizeof(Entry))
        self._ring = ring
        self._capacity = capacity
        return True

    cdef Count* _slot(self, int key, int version) except NULL:
        cdef int i
        cdef Count* counts = self._counts
        for i in range(self._slots):
            if counts[i].key == key and counts[i].version == version:
                return &counts[i]
        if self._slots == COUNT_SLOTS:
            self.lane_fold(self.inflight.stats)
        if self._slots == self._slot_capacity:
            # Grown one pair at a time from none: most connections use one or two
            # pairs, and 10,000 idle connections each holding room for 32 were 49 MB.
            self._slot_capacity = self._slots + 1
            counts = <Count*>realloc(self._counts, self._slot_capacity * sizeof(Count))
            if counts == NULL:
                raise MemoryError()
            self._counts = counts
        slot = &self._counts[self._slots]
        self._slots += 1
        slot.key = key
        slot.version = version
        slot.requests = slot.responses = 0
        slot.latency = 0.0
        for i in range(BUCKETS + 1):
            slot.buckets[i] = 0
        return slot

    cdef int _count_request(self, int key, int version) except -1:
        self._slot(key, version).requests += 1
        return 0

    cdef int _count_response(self, int key, int version, double elapsed) except -1:
        cdef Count* slot = self._slot(key, version)
        cdef int i = 0
        slot.responses += 1
        slot.latency += elapsed
        while i < BUCKETS and _bounds[i] < elapsed:  # bisect_left, as ApiStats
            i += 1
        slot.buckets[i] += 1
        return 0

    cdef int _recharge(self) except -1:
        # ClientConnection.buffered(), for a read the lane took whole: the side
        # it read holds no partial frame, and nothing is held for the handshake.
        cdef int64_t now = 0
        if self.client is not None:
            now += self.client.get_write_buffer_size()
        if self.upstream is not None:
            now += self.upstream.get_write_buffer_size()
        if not self.lane_requests:
            now += self.requests.buffered
        if not self.lane_responses:
            now += self.responses.buffered
        if now != self.charged:
            self.limits.charge(self, self.charged, now)
            self.charged = now
        return 0

    # -- what the Python path calls -------------------------------------------------------------
    def lane_spill(self):
        """Hand the ring's requests to the Python in-flight table, in order, before the
        Python path reads or changes it."""
        cdef Entry* entry
        if not self._count:
            return
        add = self.inflight.add
        while self._count:
            entry = &self._ring[self._first]
            request = add(entry.key, entry.version, entry.correlation_id)
            request.started = entry.started
            request.request_bytes = entry.size
            self._pop()
        self._release()

    def lane_absorb(self, entries):
        """Take back ``entries``, the whole Python table's requests (oldest first), which
        the caller found plain; they go before the ring's. False (nothing taken) when the
        ring cannot hold them."""
        cdef int i
        cdef Entry* slot
        cdef PlainTable table = self.lane_table
        cdef int n = len(entries)
        while self._count + n > self._capacity:
            if not self._grow():
                return False
        for i in range(n):
            self._first = (self._first - 1 + self._capacity) % self._capacity
            self._count += 1
            entry = entries[n - 1 - i]
            slot = &self._ring[self._first]
            slot.key = entry.api_key
            slot.version = entry.api_version
            slot.correlation_id = entry.correlation_id
            slot.size = entry.request_bytes
            slot.started = entry.started
            slot.walk = NULL if table is None else table._walk_of(entry.api_key, entry.api_version)
            slot.headed = table is not None and table._headed(entry.api_key, entry.api_version)
        return True

    cdef void _release(self) noexcept:
        # An empty ring gives its memory back: an idle connection holds none.
        free(self._ring)
        self._ring = NULL
        self._first = self._count = self._capacity = 0

    def lane_fold(self, stats):
        """Add the lane's counts since the last fold to ``stats`` (an ApiStats)."""
        cdef int i, b
        cdef Count* slot
        requests, responses, latency = stats.requests, stats.responses, stats.latency
        for i in range(self._slots):
            slot = &self._counts[i]
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
        self._slots = self._slot_capacity = 0
        free(self._counts)
        self._counts = NULL

    @property
    def lane_in_flight(self):
        """Requests in the ring (awaiting their responses)."""
        return self._count


cdef class UpstreamLane:
    """Base of ``UpstreamConnection``: hands each read to its pair's lane."""

    cdef public object pair
    cdef Lane _lane

    def __init__(self, pair):
        self.pair = pair
        self._lane = pair if isinstance(pair, Lane) else None

    def get_buffer(self, Py_ssize_t sizehint):
        return RECV

    def buffer_updated(self, Py_ssize_t nbytes):
        if nbytes == READ_BYTES:
            self.pair.read_filled_upstream()
        if self._lane is not None:
            self._lane.upstream_read(nbytes)
        else:
            self.pair.upstream_data(PyBytes_FromStringAndSize(_recv, nbytes))
