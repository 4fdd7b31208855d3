# cython: language_level=3
# The compiled scanner's functions, for the compiled connection reads
# (gateway/server/_lane.pyx), which call them without a Python call. See _scan.pyx.

from ._tables cimport Counts, PlainTable


cpdef Py_ssize_t scan_requests(
    bytes buf,
    Py_ssize_t start,
    Py_ssize_t end,
    PlainTable table,
    list entries,
    Counts counts,
    int max_frame_bytes,
) except -1

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
