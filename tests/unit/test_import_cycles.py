"""No import circles inside the gateway package.

The graph is built from the source with ``ast`` (nothing is imported), relative imports
resolved against the importing module. Imports under ``if TYPE_CHECKING:`` count too:
they are how the circles this test was written against (server/app ↔ server/proxy,
config ↔ server/tls, protocol/_streams ↔ _sasl/_stats) hid, and a type-only edge still
means each module must be read with the other in mind; a module that needs another's
types without depending on it names a ``Protocol`` of its own instead. Imports inside
functions count as well: deferring an import hides a circle from the interpreter, not
from the reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "gateway"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """module → modules of the package it imports (``from . import x`` names module x)."""
    modules = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = package.split(".")
                    base = ".".join(base_parts[: len(base_parts) - node.level + 1])
                    target = f"{base}.{node.module}" if node.module else base
                else:
                    target = node.module or ""
                # ``from pkg import sub``: the edge goes to the submodule; to the
                # package itself only for names that are not submodules.
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                targets = subs if len(subs) == len(node.names) else [target, *subs]
            for target in targets:
                # ``import a.b.c`` also runs a and a.b; the nearest module in the
                # package is the edge that matters.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith(PACKAGE):
                    graph[name].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the package is deep enough to matter one day)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def test_the_gateway_package_has_no_import_circles() -> None:
    circles = [c for c in strongly_connected(import_graph(ROOT)) if len(c) > 1]
    assert circles == [], f"import circles: {circles}"


def test_the_circle_finder_sees_type_checking_and_relative_imports(tmp_path: Path) -> None:
    # A made-up package: the real one must stay free of exactly this shape.
    pkg = tmp_path / PACKAGE
    (pkg / "server").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text("from .server.tls import context\n")
    (pkg / "server" / "__init__.py").write_text("")
    (pkg / "server" / "tls.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..config import Config\n"
    )
    (pkg / "server" / "app.py").write_text("from . import tls\n")
    graph = import_graph(pkg)
    assert graph["gateway.server.app"] == {"gateway.server.tls"}
    circles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert circles == [["gateway.config", "gateway.server.tls"]]


def test_the_connection_names_no_api_and_no_per_api_interceptor() -> None:
    # Issue 12: interceptors registered by API key decide; the connection only moves
    # frames. Naming an API key constant or a per-API module there brings back a method
    # per API in ClientConnection.
    from gateway.protocol import _apis

    api_constants = {name for name in vars(_apis) if name.isupper() and name.isidentifier()}
    path = ROOT / "server" / "proxy.py"
    imported: set[str] = set()
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            modules.add(("." * node.level) + (node.module or ""))
            imported |= {alias.name for alias in node.names}
    assert imported & api_constants == set()
    assert {m for m in modules if m.startswith("..interceptors.")} <= {"..interceptors.context"}
    assert "dispatch" in imported  # what it asks instead
