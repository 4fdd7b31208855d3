"""glibc's malloc told to give large buffers back to the system when they are freed.

glibc serves a request of ``M_MMAP_THRESHOLD`` bytes or more (128 KiB to start with) from
a mapping of its own, which ``free`` unmaps at once; smaller ones come from the heap,
whose freed memory mostly stays with the process. The threshold is dynamic: freeing a
mapped chunk raises it to that chunk's size (up to 32 MiB), on the theory that a program
which frees one buffer that large will want another. A gateway under a partial-frame
attack frees many: each closed attacker's gathered frame (up to queued_max_request_bytes'
share, and 20 MB in issue 34's attack) raised the threshold, and later attackers' frames
then grew in the heap, which kept them: five rounds left the gateway 82 MiB over its
baseline (docs/memory.md). Pinning the threshold (any explicit ``mallopt`` turns the
dynamic raise off) keeps every large buffer in a mapping of its own, returned to the
system on free: 9-13 MiB over it.

128 KiB is glibc's own starting value: one socket read (``READ_BYTES``, 120,000 bytes, as
a ``bytes`` object) stays under it and keeps coming from the heap, as it does now.
"""

from __future__ import annotations

import ctypes
import os

# From glibc's <malloc.h>.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024
# glibc's own tunable, read by glibc at process start: not a gateway setting, so not a
# Config key. Looking at it here only respects it (an operator's value wins over the pin).
_ENVIRONMENT = "MALLOC_MMAP_THRESHOLD_"

_pinned = False


def pin_mmap_threshold() -> bool:
    """Pin glibc's mmap threshold at MMAP_THRESHOLD in this process (and the processes it
    forks: the setting is process memory, which a fork copies). True when pinned, now or
    before; False where the C library has no ``mallopt`` (musl) or refused, or where the
    environment already set it."""
    global _pinned
    if _pinned:
        return True
    if _ENVIRONMENT in os.environ:
        return False
    try:
        # The symbols the interpreter was linked with, the C library's among them (not
        # ctypes.util.find_library, which runs ldconfig or a compiler to find it).
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    _pinned = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return _pinned
