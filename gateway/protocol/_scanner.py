"""Which build of the scanner runs: compiled (``_scan.py``, ``_tables.pyx``,
``_inflight_entry.py``), or ``_scan.py`` and ``_inflight_entry.py`` as plain Python over
the tables' Python twins (``_tables_py.py``) where it was not compiled or
``KAFKA_GATEWAY_PURE_PYTHON=1`` asks for the Python path alone (to compare, or to
debug). One choice for the process, made at import: the in-flight entries both readers
make are the chosen build's."""

from __future__ import annotations

import importlib
from types import ModuleType

from ..environment import pure_python


def _chosen() -> tuple[ModuleType, ModuleType, ModuleType]:
    """(the scanner's functions, its tables, its in-flight entry): all compiled, or the
    twin's and ``_inflight_entry.py`` as plain Python."""
    if not pure_python():
        try:
            # By name: the compiled modules have no source an import graph could read
            # (they import nothing of the package).
            tables = importlib.import_module("gateway.protocol._tables")
            entry = importlib.import_module("gateway.protocol._inflight_entry")
            scan = importlib.import_module("gateway.protocol._scan")
            if scan.COMPILED and entry.__file__ and not entry.__file__.endswith(".py"):
                return scan, tables, entry
        except ImportError:  # built without a C compiler
            pass
    from . import _tables_py
    from ._hot import plain

    return plain("_scan"), _tables_py, plain("_inflight_entry")


scan, tables, entry = _chosen()
COMPILED: bool = scan.COMPILED
InFlightRequest = entry.InFlightRequest
PlainTable = tables.PlainTable
Counts = tables.Counts
LATENCY_BUCKETS: tuple[float, ...] = tables.LATENCY_BUCKETS
scan_requests = scan.scan_requests
match_responses = scan.match_responses
tail_offset = scan.tail_offset
