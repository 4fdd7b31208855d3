"""What the one-source files (``_scan.py``, ``_inflight_entry.py``) use of Cython's pure
Python mode, for plain Python where Cython (a build requirement only) is not installed:
``compiled`` is False and the decorators do nothing, as with Cython's own ``cython``
module when a file runs uncompiled."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")

compiled = False


def cclass(cls: _T) -> _T:
    return cls


def freelist(size: int) -> Callable[[_T], _T]:
    return cclass
