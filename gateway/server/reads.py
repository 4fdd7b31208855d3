"""Which socket reads a connection has: compiled (``_lane.pyx``) where the scanner is
compiled, else the same interface in Python (``_lane_py.py``), whose reads all take the
readers' way (they call the scanner's twin first)."""

from __future__ import annotations

from ..protocol import _scanner

if _scanner.COMPILED:
    from . import _lane as lane  # type: ignore[attr-defined]
else:
    from . import _lane_py as lane  # type: ignore[no-redef]

__all__ = ["lane"]
