# cython: language_level=3
# The two reads of a frame's head in C, inline, for the compiled scanner's loops
# (gateway/protocol/_scan.py, compiled, cimports them as _scan.pxd says): the plain build
# of the scanner reads them with _scan_names.py's read_int32 and read_int16 (a call into
# another module for each head read would cost more than the read).

from libc.stdint cimport int16_t, int32_t, uint8_t, uint32_t


cdef inline int32_t read_int32(const uint8_t* p, Py_ssize_t pos) noexcept nogil:
    p += pos
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int16_t read_int16(const uint8_t* p, Py_ssize_t pos) noexcept nogil:
    p += pos
    return <int16_t>((p[0] << 8) | p[1])
