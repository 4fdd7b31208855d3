"""One declaration per module: the packages whose modules each declare one thing under
one name (``FILTER`` in ``gateway.interceptors.apis``, ``CONVERSION`` in
``gateway.bridge.apis``) are read here, so that adding one is adding one file.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Protocol, TypeVar


class Keyed(Protocol):
    @property
    def api_key(self) -> int: ...


_K = TypeVar("_K", bound=Keyed)


def discover(package: ModuleType, name: str, kind: type[_K]) -> list[_K]:
    """The ``name`` of each module of ``package`` (a ``kind``), in api key order; a module
    whose name starts with ``_`` is a helper, not a declaration. Raises TypeError for a
    module that declares none, ValueError for an api key declared twice."""
    found: dict[int, _K] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        declared = getattr(module, name, None)
        if not isinstance(declared, kind):
            raise TypeError(f"{module.__name__} declares no {name} (a {kind.__name__})")
        if declared.api_key in found:
            raise ValueError(f"api key {declared.api_key} is declared twice ({module.__name__})")
        found[declared.api_key] = declared
    return [found[key] for key in sorted(found)]
