# cython: language_level=3
"""A connection's socket reads, compiled: bytes from the shared receive buffer, through
the scanner (``gateway.protocol._scan``), to the other socket.

The protocol is the scanner's and the readers'; this module holds none of it. It only
spares a forwarded read the interpreter: the socket's callback, the copy out of the
receive buffer, the scanner's call and the write to the other side run here, without
a Python frame, which is what made a forwarded request as cheap as haproxy's (see
docs/hot-path.md). ``Reads`` is a component the connection holds, not its base: both
sockets' protocols hand their reads to it (``client_read``, ``upstream_read`` are
their ``buffer_updated``), and whatever the scanner leaves goes, in full, to its
owner's Python path (``reads.Owner``, the sans-I/O ``pair.Pair``: ``data_received``,
``upstream_data``), which returns what that gives each socket (``outbox.Outbox``); the
reads send it (``send``: one write call a side, then the close it says). What the
scanner took never reaches the owner. A read that filled the buffer is told to the
connection's ``flow.Flow``. ``gateway/server/_lane_py.py`` is the same
interface with every read taking the Python path (whose readers call the scanner's
twin).

Whether a read may go to the scanner at all (``scan_requests_ok``,
``scan_responses_ok``) is the owner's to say (``pair.Pair.scan_state``): the
reader of that side is between frames and no SASL exchange is on. The scanner's own
reads never change it.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.object cimport PyObject
from libc.stdint cimport int64_t

from gateway.protocol._scan cimport match_responses, scan_requests
from gateway.protocol._tables cimport Counts, PlainTable

from gateway.server.outbox import ABORT, shut

COMPILED = True


cdef extern from "Python.h":
    # With NULL for the items: deletes the slice (cpython.list declares it with object).
    int PyList_SetSlice(list items, Py_ssize_t low, Py_ssize_t high, PyObject* new) except -1

cdef enum:
    # The most one socket read takes (see gateway/server/reads.py, READ_BYTES); a C
    # constant, as each read compares its size with it.
    _READ_BYTES = 120_000

READ_BYTES = _READ_BYTES
# One receive buffer for every connection of the process (see reads.py, RECV).
cdef bytearray _recv_array = bytearray(_READ_BYTES)
RECV = memoryview(_recv_array)
cdef char* _recv = _recv_array  # never resized: the pointer stays valid
cdef int _ABORT = ABORT


cdef inline int _write(transport, list items) except -1:
    """``items`` to ``transport`` in one call (a writev for several); empties it."""
    if len(items) == 1:
        transport.write(items[0])
    else:
        transport.writelines(items)
    PyList_SetSlice(items, 0, len(items), NULL)
    return 0


def get_buffer(Py_ssize_t sizehint):
    """Every protocol's ``get_buffer``: the shared receive buffer."""
    return RECV


cdef class Reads:
    """One connection's reads, both sides, and the state they keep in C."""

    # Takes what the scanner leaves and returns what it gives the sockets, and is told
    # when a draining connection's responses were all taken (``reads.Owner``).
    cdef readonly object owner
    # Told when a read filled the buffer (``flow.Flow``: that side yields the loop).
    cdef readonly object flow
    # queued_max_request_bytes (ConnectionLimits), and what it is told this
    # connection is (its ``Limited``: the connection's budget).
    cdef readonly object limits, limited
    # The two transports (set by the owner once each is made).
    cdef public object client, upstream
    # Told of each request answered (the request log; ``InFlight.observer``), or None.
    cdef public object observer
    # The in-flight table's entries (``InFlight.entries``, one list for its life).
    cdef readonly list entries
    cdef public PlainTable table
    cdef readonly Counts counts
    # Bytes of requests from, and responses to, the client.
    cdef public int64_t bytes_in, bytes_out
    # Bytes counted against queued_max_request_bytes (ConnectionLimits.charge), and
    # of them the partial frames the readers held at the last full count.
    cdef public int64_t charged, partial
    cdef readonly int max_frame_bytes
    cdef public bint draining, scan_requests_ok, scan_responses_ok
    # Whether queued_max_request_bytes counts this connection's bytes (limits.budget).
    cdef readonly bint budget_on
    # Where the scanner puts a read whose heads it replaced; emptied after each.
    cdef list _pieces

    def __init__(self, owner, flow, inflight, int max_frame_bytes, limits=None, limited=None):
        self.owner = owner
        self.flow = flow
        self.entries = inflight.entries
        self.counts = inflight.counts
        self.max_frame_bytes = max_frame_bytes
        self.limits = limits
        self.limited = limited
        self.budget_on = limits is not None and bool(limits.budget)

    def client_read(self, Py_ssize_t nbytes):
        """The client socket's ``buffer_updated``: ``nbytes`` were read into RECV."""
        if nbytes == _READ_BYTES:
            self.flow.read_filled_client()
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
        self.send(self.owner.data_received(data))

    def upstream_read(self, Py_ssize_t nbytes):
        """The upstream socket's ``buffer_updated``."""
        if nbytes == _READ_BYTES:
            self.flow.read_filled_upstream()
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
                    self.owner.drained()
                elif self.budget_on:
                    self._recharge_writes()
                return
            if taken:
                data = PyBytes_FromStringAndSize(read + taken, nbytes - taken)
        self.send(self.owner.upstream_data(data))

    cpdef send(self, out):
        """Send what the owner's ``out`` (``outbox.Outbox``) holds: each side's in one
        write call (what one read gives the client goes out in one system call), then
        close as it says; then count the sockets' write buffers against the budget. The
        owner's ``on_output`` too: what it gives outside a read goes out the same way."""
        cdef list upstream = out.upstream, client = out.client
        cdef int closing = out.closing
        if closing != _ABORT:
            if upstream and self.upstream is not None:
                _write(self.upstream, upstream)
            if client and self.client is not None:
                _write(self.client, client)
        if closing:
            out.closing = 0
            PyList_SetSlice(upstream, 0, len(upstream), NULL)
            PyList_SetSlice(client, 0, len(client), NULL)
            shut(closing, self.client, self.upstream)
        if self.budget_on:
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
            self.limits.charge(self.limited, self.charged, now)
            self.charged = now
        return 0
