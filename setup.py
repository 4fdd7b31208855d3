"""The compiled lane (gateway/server/_lane.pyx); everything else is in pyproject.toml.

setuptools compiles the .pyx with Cython (a build requirement). ``optional``: without a
C compiler the install still succeeds, and the gateway runs its pure-Python path
(gateway/server/_lane_py.py); tests/unit/test_lane.py fails in CI if that happened.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("gateway.server._lane", ["gateway/server/_lane.pyx"], optional=True),
    ]
)
