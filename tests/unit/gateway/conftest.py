"""Fixtures shared by the gateway's unit tests."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

NewPackage = Callable[[str, dict[str, str]], ModuleType]


@pytest.fixture
def new_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NewPackage]:
    """Write a package of modules (module name → source) and import it: what one file
    more in a package of declarations (``gateway.declared``) does. Forgotten afterwards,
    with every module imported meanwhile."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)

    def write(name: str, modules: dict[str, str]) -> ModuleType:
        package = tmp_path / name
        package.mkdir()
        (package / "__init__.py").write_text("")
        for module, source in modules.items():
            (package / f"{module}.py").write_text(textwrap.dedent(source))
        return importlib.import_module(name)

    yield write
    for name in set(sys.modules) - before:
        del sys.modules[name]
