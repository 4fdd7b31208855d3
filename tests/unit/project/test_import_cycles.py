"""No import circles in the project's packages (``gateway`` and ``featurectl``).

The graph is built from the source with ``ast`` (nothing is imported), relative imports
resolved against the importing module, and every import statement counts wherever it
stands: at the top, under ``if TYPE_CHECKING:``, inside a function, in a ``try``. Imports
under ``if TYPE_CHECKING:`` are how the circles this test was written against
(server/app ↔ server/proxy, config ↔ server/tls, protocol/_streams ↔ _sasl/_stats,
plan/job ↔ plan/report) hid, and a type-only edge still means each module must be read
with the other in mind; a module that needs another's types without depending on it
names a ``Protocol`` of its own, or both take the types from a third module. Imports
inside functions count as well: deferring an import hides a circle from the
interpreter, not from the reader. ``importlib.import_module("...")`` and
``__import__("...")`` with a literal name count too. One graph spans both packages, so
a circle through both would show. The compiled modules (``.pyx``, ``.pxd``, and a ``.py``
beside its ``.pxd``) are in it as well, with their ``import`` and ``cimport`` lines read
as text (Cython is not Python's grammar).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGES = ("gateway", "featurectl")
REPO = Path(__file__).resolve().parents[3]
# Calls that import the module their first argument names (when that is a literal).
IMPORT_CALLS = {"import_module", "__import__"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_by_call(node: ast.AST) -> str | None:
    """The module ``importlib.import_module("a.b")`` or ``__import__("a.b")`` names."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0]
    if name in IMPORT_CALLS and isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


# A Cython module's imports: ``from a.b cimport x``, ``from .a import x``, ``import a.b``.
CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+(\.*[\w.]*)\s+c?import\b|c?import\s+([\w.]+))", re.M)


def resolve(package: str, level: int, module: str | None) -> str:
    """The absolute name of ``from <level dots><module> import``, seen from ``package``."""
    if not level:
        return module or ""
    base_parts = package.split(".")
    base = ".".join(base_parts[: len(base_parts) - level + 1])
    return f"{base}.{module}" if module else base


def import_graph(*roots: Path) -> dict[str, set[str]]:
    """module → modules of the packages it imports (``from . import x`` names module x)."""
    modules: dict[str, Path] = {}
    for root in roots:
        for pattern in ("*.py", "*.pyx", "*.pxd"):  # a .pxd alone: C declarations only
            for p in root.rglob(pattern):
                modules.setdefault(module_name(p, root), p)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        if path.suffix in (".pyx", ".pxd") or path.with_suffix(".pxd").exists():
            # A .py beside its .pxd is compiled too (Cython's pure Python mode): the
            # .pxd's cimports are its edges as well as the .py's own imports (below).
            sources = (path.with_suffix(".pyx"), path.with_suffix(".pxd"))
            text = "\n".join(p.read_text() for p in sources if p.exists())
            for match in CYTHON_IMPORT.finditer(text):
                dotted = match.group(1) or match.group(2)
                level = len(dotted) - len(dotted.lstrip("."))
                target = resolve(package, level, dotted.lstrip(".") or None)
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
            if path.suffix != ".py":
                continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = resolve(package, node.level, node.module)
                # ``from pkg import sub``: the edge goes to the submodule; to the
                # package itself only for names that are not submodules.
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
                targets = subs if len(subs) == len(node.names) else [target, *subs]
            elif (called := imported_by_call(node)) is not None:
                targets = [called]
            for target in targets:
                # ``import a.b.c`` also runs a and a.b; the nearest module in the
                # package is the edge that matters.
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
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


def test_the_packages_have_no_import_circles() -> None:
    graph = import_graph(*(REPO / package for package in PACKAGES))
    # The graph really holds both packages (a wrong root would find no circle either).
    assert "featurectl.plan.job" in graph and "gateway.server.proxy" in graph
    # ... and the compiled modules, with their cimports.
    assert "gateway.protocol._tables" in graph["gateway.protocol._scan"]
    circles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert circles == [], f"import circles: {circles}"


def test_the_circle_finder_sees_type_checking_and_relative_imports(tmp_path: Path) -> None:
    # A made-up package: the real one must stay free of exactly this shape.
    pkg = tmp_path / "gateway"
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


def test_the_circle_finder_sees_imports_inside_functions_and_by_name(tmp_path: Path) -> None:
    # The shape of the featurectl circle: the job imports the report where it runs it,
    # the report the job's types under TYPE_CHECKING; and the other ways to import.
    plan = tmp_path / "featurectl" / "plan"
    plan.mkdir(parents=True)
    (plan.parent / "__init__.py").write_text("")
    (plan / "__init__.py").write_text("")
    (plan / "job.py").write_text(
        "def run():\n    from featurectl.plan.report import write\n    return write()\n"
    )
    (plan / "report.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .job import run\n"
    )
    (plan / "lazy.py").write_text(
        "import importlib\n"
        "def load():\n"
        "    try:\n        from . import job\n    except ImportError:\n        job = None\n"
        "    return importlib.import_module('featurectl.plan.report'), __import__('gateway')\n"
    )
    gateway = tmp_path / "gateway"
    gateway.mkdir()
    (gateway / "__init__.py").write_text("def plan():\n    import featurectl.plan.lazy\n")
    graph = import_graph(plan.parent, gateway)
    assert graph["featurectl.plan.job"] == {"featurectl.plan.report"}
    assert graph["featurectl.plan.lazy"] == {
        "featurectl.plan.job",
        "featurectl.plan.report",
        "gateway",
    }
    circles = sorted(c for c in strongly_connected(graph) if len(c) > 1)
    assert circles == [
        ["featurectl.plan.job", "featurectl.plan.report"],
        ["featurectl.plan.lazy", "gateway"],
    ]


def test_the_connection_names_no_api_and_no_per_api_interceptor() -> None:
    # Issue 12: interceptors registered by API key decide; the connection only moves
    # frames. Naming an API key constant or a per-API module there brings back a method
    # per API in the pair (or its asyncio adapter, ClientConnection).
    from gateway.protocol import _apis

    api_constants = {name for name in vars(_apis) if name.isupper() and name.isidentifier()}
    imported: set[str] = set()
    modules: set[str] = set()
    for name in ("proxy.py", "pair.py"):
        path = REPO / "gateway" / "server" / name
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                modules.add(("." * node.level) + (node.module or ""))
                imported |= {alias.name for alias in node.names}
    assert imported & api_constants == set()
    assert {m for m in modules if m.startswith("..interceptors.")} <= {"..interceptors.context"}
    assert "dispatch" in imported  # what it asks instead
