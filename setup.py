"""The compiled scanner (gateway/protocol/_scan.pyx, _tables.pyx) and the connection reads
that call it (gateway/server/_lane.pyx); everything else is in pyproject.toml.

setuptools compiles the .pyx with Cython (a build requirement). ``optional``: without a
C compiler the install still succeeds, and the gateway runs the scanner's Python twin
(gateway/protocol/_scan_py.py); tests/unit/gateway/protocol/test_lane.py fails in CI if
that happened.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("gateway.protocol._tables", ["gateway/protocol/_tables.pyx"], optional=True),
        Extension("gateway.protocol._scan", ["gateway/protocol/_scan.pyx"], optional=True),
        Extension("gateway.server._lane", ["gateway/server/_lane.pyx"], optional=True),
    ]
)
