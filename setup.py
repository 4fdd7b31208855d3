"""The compiled scanner and the connection reads that call it; everything else is in
pyproject.toml.

Cython (a build requirement) compiles gateway/protocol/_scan.py and _inflight_entry.py
as they stand (each .pxd beside them gives the C types: Cython's pure Python mode), the
C tables (_tables.pyx) and the reads (gateway/server/_lane.pyx).
``optional``: without a C compiler the install still succeeds, and the gateway runs the
same .py files as plain Python over the tables' Python twins (_tables_py.py);
tests/unit/gateway/protocol/test_lane.py fails in CI if that happened.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

# ``cythonize`` makes Extensions of its own from these, without their ``optional``.
EXTENSIONS = cythonize(
    [
        Extension(name, [path])
        for name, path in (
            ("gateway.protocol._inflight_entry", "gateway/protocol/_inflight_entry.py"),
            ("gateway.protocol._tables", "gateway/protocol/_tables.pyx"),
            ("gateway.protocol._scan", "gateway/protocol/_scan.py"),
            ("gateway.server._lane", "gateway/server/_lane.pyx"),
        )
    ],
    language_level=3,
)
for extension in EXTENSIONS:
    extension.optional = True

setup(ext_modules=EXTENSIONS)
