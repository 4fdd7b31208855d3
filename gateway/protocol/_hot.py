"""``_hotpath.py`` as plain Python, in both builds: what the Python side runs.

The compiled scanner (``_scan.pyx``) cimports the compiled build of ``_hotpath.py``;
its functions are C functions there, which Python cannot call. Everything else (the
readers' loops, ``_rules``; the in-flight table, ``_inflight``; the scanner's twin,
``_scan_py``) runs the same file as plain Python, loaded here from its source whether
or not a compiled build sits beside it: one source, and in a compiled process both of
its builds run, the tests holding them to each other (test_scan.py).
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
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


hotpath = plain("_hotpath")
IMPOSSIBLE: int = hotpath.IMPOSSIBLE
NOT_HERE: int = hotpath.NOT_HERE
answers = hotpath.answers
produce_acks = hotpath.produce_acks
request_end = hotpath.request_end
response_end = hotpath.response_end
scanner_takes_key = hotpath.scanner_takes_key
tail_empty = hotpath.tail_empty
takes_answer = hotpath.takes_answer
walk = hotpath.walk
