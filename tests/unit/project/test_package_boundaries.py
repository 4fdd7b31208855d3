"""Packages meet at their public faces, and depend one way.

A unit is a package of ``gateway`` or ``featurectl`` (``gateway.protocol``,
``featurectl.plan``) or a module beside them (``gateway.versions``). Two rules, read from
the same import graph as test_import_cycles (every import statement, wherever it stands):

* no unit imports another unit's private module (a dotted part starting with ``_``):
  ``gateway.protocol`` is the codec's one public face, ``gateway.config`` the config's;
  what is behind them is theirs to rearrange. One exception: a compiled module's
  ``cimport`` of another's ``.pxd`` (the compiled lane calls the compiled scanner at C
  speed), as Cython shares C-level functions and types no other way; the ``.pxd`` is
  that module's C face, declared for exactly this;
* no two units import each other: a two-way dependency is a circle at the scale a reader
  thinks in, even where no module circle closes.
"""

from __future__ import annotations

from tests.unit.project.test_import_cycles import PACKAGES, REPO, import_graph


def unit(module: str) -> str:
    return ".".join(module.split(".")[:2])


def private(module: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in module.split(".")[1:])


def cross_unit_edges() -> list[tuple[str, str]]:
    graph = import_graph(*(REPO / p for p in PACKAGES))
    return sorted(
        (source, target)
        for source, targets in graph.items()
        for target in targets
        if unit(source) != unit(target)
    )


def c_level(source: str, target: str) -> bool:
    """A compiled module cimporting another's C declarations (its ``.pxd``)."""

    def path(module: str, suffix: str) -> bool:
        return (REPO / (module.replace(".", "/") + suffix)).is_file()

    return path(source, ".pyx") and path(target, ".pxd")


def private_crossings(edges: list[tuple[str, str]]) -> list[str]:
    return [f"{s} -> {t}" for s, t in edges if private(t) and not c_level(s, t)]


def two_way(edges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    between = {(unit(s), unit(t)) for s, t in edges}
    return sorted((a, b) for a, b in between if a < b and (b, a) in between)


def test_no_package_imports_another_packages_private_module() -> None:
    offenders = private_crossings(cross_unit_edges())
    assert offenders == [], "import these through the package's public names:\n" + "\n".join(
        offenders
    )


def test_no_two_packages_depend_on_each_other() -> None:
    edges = cross_unit_edges()
    pairs = two_way(edges)
    detail = [
        f"{a} <-> {b}: "
        + ", ".join(f"{s} -> {t}" for s, t in edges if {unit(s), unit(t)} == {a, b})
        for a, b in pairs
    ]
    assert pairs == [], "two-way package dependencies:\n" + "\n".join(detail)


def test_the_rules_see_what_they_forbid() -> None:
    edges = [
        ("gateway.server.proxy", "gateway.protocol._scanner"),
        ("gateway.server.proxy", "gateway.protocol"),
        ("gateway.config._validate", "gateway.server.tls"),
        ("gateway.server.app", "gateway.config"),
        ("gateway.versions", "gateway.protocol"),
    ]
    assert private_crossings(edges) == ["gateway.server.proxy -> gateway.protocol._scanner"]
    assert c_level("gateway.server._lane", "gateway.protocol._scan")
    assert not c_level("gateway.server.proxy", "gateway.protocol._scan")
    assert two_way(edges) == [("gateway.config", "gateway.server")]
    assert unit("gateway.__init__") == "gateway.__init__" and not private("gateway.__init__")
