"""The one-source files of the hot path as plain Python, in both builds: what the Python
side runs.

Cython compiles ``_scan.py`` and ``_inflight_entry.py`` as they stand for the compiled
scanner, whose functions are C functions there, which Python cannot
call. The readers' loops (``_rules``), the in-flight table (``_inflight``) and the
tables' twins (``_tables_py``) run the same files as plain Python, loaded here from
their source whether or not a compiled build sits beside them: in a compiled process
both builds of each run, the tests holding them to each other (test_scan.py).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def plain(module: str) -> ModuleType:
    """``gateway/protocol/<module>.py`` as plain Python, whether or not a compiled build
    of it sits beside it (loaded once, as ``<module>_plain``)."""
    name = f"{__package__}.{module}_plain"
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{module}.py"))
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    spec.loader.exec_module(loaded)
    return loaded


_scan = plain("_scan")
IMPOSSIBLE: int = _scan.IMPOSSIBLE
NOT_HERE: int = _scan.NOT_HERE
produce_acks_at = _scan.produce_acks_at
read_int16 = _scan.read_int16
scanner_takes_key = _scan.scanner_takes_key
answers = _scan.answers
request_end = _scan.request_end
response_end = _scan.response_end
takes_answer = _scan.takes_answer
