# cython: language_level=3
# The two reads of a frame's head in C, inline, for the compiled scanner's loops
# (gateway/protocol/_scan.pyx): a call into another module for each would cost more than
# the read. The rules the scanner holds a frame to are gateway/protocol/_hotpath.py's;
# the Python side reads heads with _rules.REQUEST_HEAD and RESPONSE_HEAD.

from libc.stdint cimport int16_t, int32_t, uint8_t, uint32_t


cdef inline int32_t read_int32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int16_t read_int16(const uint8_t* p) noexcept nogil:
    return <int16_t>((p[0] << 8) | p[1])
