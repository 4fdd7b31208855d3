# cython: language_level=3
# The wire's primitives in C, inline, for the compiled scanner (gateway/protocol/_scan.pyx).
# Each reads within ``[pos, end)`` and returns the position after what it read, or -1 when
# the bytes end first or claim what cannot be: the scanner then leaves the frame to the
# Python readers, which say why if it is bad. Their Python counterparts are in
# gateway/protocol/_wire.py.

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t


cdef inline int32_t read_int32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int16_t read_int16(const uint8_t* p) noexcept nogil:
    return <int16_t>((p[0] << 8) | p[1])


cdef inline Py_ssize_t read_uvarint(
    const uint8_t* p, Py_ssize_t pos, Py_ssize_t end, int64_t* value
) noexcept nogil:
    cdef int64_t result = 0
    cdef int shift = 0
    while pos < end and shift < 35:
        result |= <int64_t>(p[pos] & 0x7F) << shift
        pos += 1
        if not p[pos - 1] & 0x80:
            value[0] = result
            return pos
        shift += 7
    return -1


cdef inline Py_ssize_t read_length(
    const uint8_t* p, Py_ssize_t pos, Py_ssize_t end, bint flexible, int width, int64_t* value
) noexcept nogil:
    """A length or count: compact (uvarint of length + 1), or classic int16/int32."""
    if flexible:
        pos = read_uvarint(p, pos, end, value)
        value[0] -= 1
        return pos
    if pos + width > end:
        return -1
    value[0] = read_int16(p + pos) if width == 2 else read_int32(p + pos)
    return pos + width


cdef inline Py_ssize_t skip_blob(
    const uint8_t* p, Py_ssize_t pos, Py_ssize_t end, bint flexible, int width
) noexcept nogil:
    """Past a string, bytes or records (nullable: length -1)."""
    cdef int64_t length
    pos = read_length(p, pos, end, flexible, width, &length)
    if pos < 0 or length < -1 or length > end - pos:
        return -1
    return pos + length if length > 0 else pos


cdef inline Py_ssize_t skip_tags(const uint8_t* p, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """Past a tagged-field section (count, then tag, size and bytes each)."""
    cdef int64_t count, value, i
    pos = read_uvarint(p, pos, end, &count)
    if pos < 0 or count > end - pos:
        return -1
    for i in range(count):
        pos = read_uvarint(p, pos, end, &value)  # tag
        if pos < 0:
            return -1
        pos = read_uvarint(p, pos, end, &value)  # size
        if pos < 0 or value > end - pos:
            return -1
        pos += value
    return pos
