# cython: language_level=3
# The C fields of _inflight_entry.py's InFlightRequest, which Cython compiles as it
# stands: the compiled scanner (_scan.py) makes and reads these without a Python call.

cdef class InFlightRequest:
    cdef public int api_key, api_version, correlation_id
    cdef public double started
    cdef public Py_ssize_t request_bytes, response_bytes
    cdef public object local, context
    cdef public bint to_upstream, expects_response
