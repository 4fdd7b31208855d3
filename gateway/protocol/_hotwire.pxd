# cython: language_level=3
# The C types of _hotwire.py, which Cython compiles as it stands: the compiled scanner
# (_scan.py, compiled) cimports these; the Python side runs the same file as plain
# Python (_hot.py). The rules themselves are in _hotwire.py, and only there.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

cimport cython


cdef Py_ssize_t NOT_HERE, IMPOSSIBLE
cdef int _W_SKIP, _W_BLOB, _W_STRUCT, _W_ARRAY_OF_ENTITIES, _W_ARRAY_OF_FIXED

@cython.locals(value=int64_t)
cdef int32_t read_int32(const uint8_t* buf, Py_ssize_t pos) noexcept nogil
@cython.locals(value=int64_t)
cdef int32_t read_int16(const uint8_t* buf, Py_ssize_t pos) noexcept nogil

@cython.locals(result=int64_t, shift=int, byte=uint8_t)
cdef (int64_t, Py_ssize_t) _uvarint(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end) noexcept nogil
@cython.locals(value=int64_t)
cdef (int64_t, Py_ssize_t) _length(
    const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, bint flexible, int width
) noexcept nogil
@cython.locals(length=int64_t)
cdef Py_ssize_t _skip_blob(
    const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, bint flexible, int width
) noexcept nogil
@cython.locals(count=int64_t, size=int64_t, _tag=int64_t, _i=int64_t)
cdef Py_ssize_t skip_tags(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end) noexcept nogil

cdef Py_ssize_t produce_acks_at(
    const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, int version
) noexcept nogil

@cython.locals(
    flags=int32_t, flexible=bint, step=Py_ssize_t, stop=Py_ssize_t, element=Py_ssize_t,
    kind=int32_t, arg=int32_t, count=int64_t, _i=int64_t,
)
cdef Py_ssize_t walk_tail(
    const int32_t* program, Py_ssize_t at, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end
) noexcept nogil
cdef bint tail_empty(
    const int32_t* program, const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end
) noexcept nogil
