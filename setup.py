"""The compiled scanner (gateway/protocol/_scan.pyx, _tables.pyx), the rules it runs
(gateway/protocol/_hotpath.py, compiled as it stands, with _hotpath.pxd) and the
connection reads that call it (gateway/server/_lane.pyx); everything else is in
pyproject.toml.

Cython (a build requirement) compiles the four. ``optional``: without a C compiler the
install still succeeds, and the gateway runs the scanner's Python twin
(gateway/protocol/_scan_py.py) and _hotpath.py as plain Python;
tests/unit/gateway/protocol/test_lane.py fails in CI if that happened.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(name, [path], optional=True)
            for name, path in (
                ("gateway.protocol._inflight_entry", "gateway/protocol/_inflight_entry.py"),
                ("gateway.protocol._tables", "gateway/protocol/_tables.pyx"),
                ("gateway.protocol._hotwire", "gateway/protocol/_hotwire.py"),
                ("gateway.protocol._scan", "gateway/protocol/_scan.py"),
                ("gateway.server._lane", "gateway/server/_lane.pyx"),
            )
        ],
        language_level=3,
    )
)
