"""The names ``_scan.py`` binds in its plain build where its compiled build cimports C
(``_scan.pxd``): the wire's integer reads, the tables' clock and counts, a walk program
kept, a list's front dropped and a head's new start. Each does in Python what its C
counterpart does in C; the rules that call them are ``_scan.py``'s.
"""

from __future__ import annotations

import struct
from time import perf_counter as clock
from typing import Any

__all__ = [
    "clock",
    "count_request",
    "count_response",
    "drop_first",
    "head_start",
    "keep_walk",
    "read_int16",
    "read_int32",
]

_INT32 = struct.Struct(">i")
# One C call a read: a third of the time of four byte reads shifted together in Python.
_INT32_AT = _INT32.unpack_from
_INT16_AT = struct.Struct(">h").unpack_from


def read_int32(buf: bytes, pos: int) -> int:
    return _INT32_AT(buf, pos)[0]


def read_int16(buf: bytes, pos: int) -> int:
    return _INT16_AT(buf, pos)[0]


def count_request(counts: Any, key: int, version: int) -> None:
    counts.request(key, version)


def count_response(counts: Any, key: int, version: int, elapsed: float) -> None:
    counts.response(key, version, elapsed)


def keep_walk(key: int, version: int, program: tuple[int, ...]) -> tuple[int, ...]:
    return program


def drop_first(entries: list[Any], count: int) -> None:
    del entries[:count]


def head_start(size: int, buf: bytes, pos: int, rewritten: bytes) -> bytes:
    return _INT32.pack(size) + buf[pos + 4 : pos + 8] + rewritten
