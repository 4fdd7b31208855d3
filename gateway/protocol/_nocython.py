"""The two decorators of Cython's pure Python mode that ``_inflight_entry.py`` uses, for
plain Python where Cython (a build requirement only) is not installed: there they do
nothing, as Cython's own ``cython`` module does when the file runs uncompiled."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


def cclass(cls: _T) -> _T:
    return cls


def freelist(size: int) -> Callable[[_T], _T]:
    return cclass
