"""Code outside the gateway package imports only its public modules.

featurectl, the bench, the test harness and the black-box tests speak Kafka through
``gateway.wire`` (and use the gateway's other public modules); a module whose name
starts with ``_`` is the gateway's to change without telling them. ``tests/unit`` is
exempt: it tests those private modules themselves.

Read from the source with ``ast`` (nothing is imported), as test_import_cycles does.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
EXEMPT = ("gateway/", "tests/unit/")


def private_imports(source: str, path: str) -> list[str]:
    """The private ``gateway`` modules (``gateway.x._y``) that ``source`` imports."""
    found = []
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "gateway" and any(_private(part) for part in parts[1:]):
                found.append(f"{path}:{node.lineno}: {name}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def tracked_python_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [p for p in listed if not p.startswith(EXEMPT) and (REPO / p).is_file()]


def test_no_module_outside_the_gateway_imports_a_private_gateway_module() -> None:
    offenders = [
        found
        for path in tracked_python_files()
        for found in private_imports((REPO / path).read_text(), path)
    ]
    assert not offenders, (
        "import these through gateway.wire (or another public gateway module):\n"
        + "\n".join(offenders)
    )


def test_the_check_sees_each_form_of_import() -> None:
    source = (
        "import gateway.protocol._wire\n"
        "from gateway.interceptors._codec import encode_request\n"
        "from gateway.server import _preload\n"
        "from gateway.wire import encode_request, _private_name\n"
        "from gateway import __version__\n"
    )
    assert private_imports(source, "x.py") == [
        "x.py:1: gateway.protocol._wire",
        "x.py:2: gateway.interceptors._codec",
        "x.py:2: gateway.interceptors._codec.encode_request",
        "x.py:3: gateway.server._preload",
        "x.py:4: gateway.wire._private_name",
    ]
