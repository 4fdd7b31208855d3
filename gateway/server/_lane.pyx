# cython: language_level=3
"""A connection's socket reads, compiled: bytes from the shared receive buffer, through
the scanner (``gateway.protocol._scan``), to the other socket.

The protocol is the scanner's and the readers'; this module holds none of it. It only
spares a forwarded read the interpreter: the socket's callback, the copy out of the
receive buffer, the scanner's call and the write to the other side run here, without
a Python frame, which is what made a forwarded request as cheap as haproxy's (see
docs/hot-path.md). Whatever the scanner leaves goes to the connection's
``data_received`` or ``upstream_data``, the Python path, in full: what the scanner
took never reaches it again. ``gateway/server/_lane_py.py`` is the same interface
with every read taking the Python path (whose readers call the scanner's twin).

Whether a read may go to the scanner at all (``scan_requests_ok``,
``scan_responses_ok``) is the connection's to say (``ClientConnection._scan_state``):
the reader of that side is between frames and no SASL exchange is on. The scanner's
own reads never change it.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.object cimport PyObject
from libc.stdint cimport int64_t

from gateway.protocol._scan cimport match_responses, scan_requests
from gateway.protocol._tables cimport Counts, PlainTable

COMPILED = True


cdef extern from "Python.h":
    # With NULL for the items: deletes the slice (cpython.list declares it with object).
    int PyList_SetSlice(list items, Py_ssize_t low, Py_ssize_t high, PyObject* new) except -1

cdef enum:
    # The most one socket read takes (see gateway/server/proxy.py, READ_BYTES); a C
    # constant, as each read compares its size with it.
    _READ_BYTES = 120_000

READ_BYTES = _READ_BYTES
# One receive buffer for every connection of the process (see proxy.py, _RECV).
cdef bytearray _recv_array = bytearray(_READ_BYTES)
RECV = memoryview(_recv_array)
cdef char* _recv = _recv_array  # never resized: the pointer stays valid


cdef class Reads:
    """Base of ``ClientConnection``: its reads, and the state they share with it."""

    cdef public object client, upstream, inflight, limits
    # Told of each request answered (the request log; ``InFlight.observer``), or None.
    cdef public object observer
    # The in-flight table's entries (``InFlight.entries``, one list for its life).
    cdef public list entries
    cdef public PlainTable table
    cdef public Counts counts
    # Bytes of requests from, and responses to, the client.
    cdef public int64_t bytes_in, bytes_out
    # Bytes counted against queued_max_request_bytes (ConnectionLimits.charge), and
    # of them the partial frames the readers held at the last full count.
    cdef public int64_t charged, partial
    cdef public int max_frame_bytes
    cdef public bint draining, scan_requests_ok, scan_responses_ok
    # Whether queued_max_request_bytes counts this connection's bytes (limits.budget).
    cdef public bint budget_on
    # Where the scanner puts a read whose heads it replaced; emptied after each.
    cdef list _pieces

    def get_buffer(self, Py_ssize_t sizehint):
        return RECV

    def buffer_updated(self, Py_ssize_t nbytes):
        if nbytes == _READ_BYTES:
            self.read_filled_client()
        data = PyBytes_FromStringAndSize(_recv, nbytes)
        cdef Py_ssize_t taken = 0
        if self.scan_requests_ok:
            taken = scan_requests(
                data, 0, nbytes, self.table, self.entries, self.counts, self.max_frame_bytes
            )
            if taken == nbytes:
                self.upstream.write(data)
                self.bytes_in += nbytes
                if self.budget_on:
                    self._recharge_writes()
                return
            if taken:
                self.upstream.write(PyBytes_FromStringAndSize(PyBytes_AS_STRING(data), taken))
                self.bytes_in += taken
                data = PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + taken, nbytes - taken)
        self.data_received(data)

    cdef upstream_read(self, Py_ssize_t nbytes):
        data = PyBytes_FromStringAndSize(_recv, nbytes)
        cdef const char* read = PyBytes_AS_STRING(data)
        cdef Py_ssize_t taken = 0
        cdef list pieces, done
        client = self.client
        if self.scan_responses_ok and client is not None:
            observer = self.observer
            done = None if observer is None else []
            pieces = self._pieces
            if pieces is None:
                pieces = self._pieces = []
            taken = match_responses(
                data,
                0,
                nbytes,
                self.table,
                self.entries,
                self.counts,
                self.max_frame_bytes,
                pieces,
                done,
            )
            if pieces:  # a head was replaced: what was taken goes out in pieces
                client.writelines(pieces)
                PyList_SetSlice(pieces, 0, len(pieces), NULL)  # del makes a slice object
            elif taken == nbytes:
                client.write(data)
            elif taken:
                client.write(PyBytes_FromStringAndSize(read, taken))
            if done:
                for entry in done:
                    observer(entry)
            self.bytes_out += taken
            if taken == nbytes:
                if self.draining:
                    self.drained()
                elif self.budget_on:
                    self._recharge_writes()
                return
            if taken:
                data = PyBytes_FromStringAndSize(read + taken, nbytes - taken)
        self.upstream_data(data)

    def recharge_writes(self):
        self._recharge_writes()

    cdef int _recharge_writes(self) except -1:
        """Charge the budget after a read the scanner took whole: the readers hold the
        partial frames they held at the last full count (the side that was read holds
        none, before and after), so only the transports' buffers are asked again."""
        cdef int64_t now = self.partial, held
        if self.client is not None:
            held = self.client.get_write_buffer_size()  # typed: no int object for the sum
            now += held
        if self.upstream is not None:
            held = self.upstream.get_write_buffer_size()
            now += held
        if now != self.charged:
            self.limits.charge(self, self.charged, now)
            self.charged = now
        return 0


cdef class UpstreamReads:
    """Base of ``UpstreamConnection``: hands each read to its pair's reads."""

    cdef public object pair
    cdef Reads _lane

    def __init__(self, pair):
        self.pair = pair
        self._lane = pair if isinstance(pair, Reads) else None

    def get_buffer(self, Py_ssize_t sizehint):
        return RECV

    def buffer_updated(self, Py_ssize_t nbytes):
        if nbytes == _READ_BYTES:
            self.pair.read_filled_upstream()
        if self._lane is not None:
            self._lane.upstream_read(nbytes)
        else:
            self.pair.upstream_data(PyBytes_FromStringAndSize(_recv, nbytes))
