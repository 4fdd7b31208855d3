"""Each rule of the hot path has one source, which both builds run.

The compiled scanner and the Python path once each had their own copy of these rules
(issue 44): a fix had to land twice, and one that landed once was caught only by the
tests that compare the two. Now each lives in one ``.py`` file that Cython compiles as
it stands (setup.py) and that the Python side runs as plain Python (``_hot.plain``).
This lists where each lives, and fails when a second definition of one appears
anywhere in the gateway (a ``def``, ``cdef`` or ``cpdef`` of its name, or of the name
its old C copy had), when its file is no longer compiled, or when a ``.pyx`` twin of
its file comes back.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gateway.protocol import _scanner
from gateway.protocol._hot import plain

REPO = Path(__file__).resolve().parents[4]
GATEWAY = REPO / "gateway"
PROTOCOL = "gateway/protocol"

# rule → (the file it lives in, the functions or classes that are it)
RULES: dict[str, tuple[str, frozenset[str]]] = {
    "frame bounds": (f"{PROTOCOL}/_scan.py", frozenset({"request_end", "response_end"})),
    "Produce acks": (f"{PROTOCOL}/_scan.py", frozenset({"produce_acks_at"})),
    "answers the oldest request": (f"{PROTOCOL}/_scan.py", frozenset({"answers", "takes_answer"})),
    "releases_local": (f"{PROTOCOL}/_scan.py", frozenset({"releases_local"})),
    "the tagged-section walk": (f"{PROTOCOL}/_scan.py", frozenset({"walk_tail", "tail_empty"})),
    "a head replaced": (f"{PROTOCOL}/_scan.py", frozenset({"replace_head"})),
    "the in-flight entry": (f"{PROTOCOL}/_inflight_entry.py", frozenset({"InFlightRequest"})),
    "the SaslHandshake exclusion": (f"{PROTOCOL}/_scan.py", frozenset({"scanner_takes_key"})),
    "the scans": (f"{PROTOCOL}/_scan.py", frozenset({"scan_requests", "match_responses"})),
}
# The names the rules' second copies had (the C scanner's, the twin's): none may return.
OLD_COPIES = frozenset(
    {"_frame_end", "_produce_acks", "_releases_local", "_replace_head", "_tail_empty"}
)
# A Cython definition: ``def``, ``cdef``/``cpdef`` (a return type first), ``cdef class``.
CYTHON_DEF = re.compile(
    r"^\s*(?:c?p?def|cdef\s+class|cdef\s+inline)\b[^(:=\n]*?\b(\w+)\s*[(:]", re.M
)


def has_body(text: str, match: re.Match[str]) -> bool:
    """Whether the Cython definition ``match`` found in ``text`` has a body (its
    signature ends in a colon), not a declaration's end (``noexcept nogil``, a newline)."""
    start = end = match.end() - 1
    if text[start] == "(":  # to the parenthesis that closes the signature's
        depth = 0
        for end in range(start, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
    return text[end:].split("\n", 1)[0].split("#", 1)[0].rstrip().endswith(":")


def definitions() -> dict[str, list[str]]:
    """name → the files of the gateway that define a function or class of that name (a
    ``.pxd``'s declarations are types, not definitions; its ``inline`` ones with a body
    are: a declaration marked ``inline`` only asks the C compiler to inline the
    ``.py``'s function)."""
    found: dict[str, list[str]] = {}
    for path in sorted(GATEWAY.rglob("*")):
        relative = str(path.relative_to(REPO))
        names: list[str] = []
        if path.suffix == ".py":
            tree = ast.parse(path.read_text(), relative)
            names = [
                node.name
                for node in ast.walk(tree)
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            ]
        elif path.suffix == ".pyx":
            names = CYTHON_DEF.findall(path.read_text())
        elif path.suffix == ".pxd":
            text = path.read_text()
            names = [
                m.group(1)
                for m in CYTHON_DEF.finditer(text)
                if "inline" in m.group(0) and has_body(text, m)
            ]
        for name in names:
            found.setdefault(name, []).append(relative)
    return found


def compiled_sources() -> set[str]:
    """The .py files setup.py compiles with Cython."""
    return set(re.findall(r'"(gateway/[\w/]+\.py)"', (REPO / "setup.py").read_text()))


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_is_defined_once_in_a_file_both_builds_run(rule: str) -> None:
    home, names = RULES[rule]
    found = definitions()
    for name in names:
        assert found.get(name) == [home], f"{rule}: {name} is defined in {found.get(name)}"
    assert home in compiled_sources(), f"{rule}: setup.py does not compile {home}"
    assert not (REPO / home).with_suffix(".pyx").exists(), f"{rule}: a .pyx twin of {home}"


def test_no_old_copy_of_a_rule_is_back() -> None:
    found = definitions()
    assert {name: found[name] for name in OLD_COPIES if name in found} == {}


def test_the_sasl_handshake_is_excluded_in_one_place() -> None:
    """The tables (C and Python) ask ``scanner_takes_key``; none names the key itself,
    and the scanner's file names it only there."""
    for table in ("_tables.pyx", "_tables.pxd", "_tables_py.py", "_scan.pxd"):
        text = (GATEWAY / "protocol" / table).read_text()
        assert "SASL_HANDSHAKE" not in text and "SaslHandshake" not in text.split('"""')[0], table
    home = RULES["the SaslHandshake exclusion"][0]
    tree = ast.parse((REPO / home).read_text())
    named = {id(node) for node in ast.walk(tree) if getattr(node, "id", None) == "SASL_HANDSHAKE"}
    rule = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "scanner_takes_key"
    )
    assert named and named == {id(node) for node in ast.walk(rule) if id(node) in named}


def test_the_rules_the_scans_run_per_frame_are_in_the_scans_module() -> None:
    """A call into another compiled module goes through a pointer, which the C compiler
    cannot inline (bench/README.md has what that cost the scans): each rule the scans
    run per frame lives in their module, and the scans cimport no function from another
    of the one-source files (the entry's type, the tables' and the C head reads only)."""
    scans = RULES["the scans"][0]
    elsewhere = {rule: home for rule, (home, _) in RULES.items() if home != scans}
    assert elsewhere == {"the in-flight entry": f"{PROTOCOL}/_inflight_entry.py"}
    pxd = (REPO / scans).with_suffix(".pxd").read_text()
    cimported = set(re.findall(r"^from \.(\w+) cimport", pxd, re.M))
    assert cimported == {"_cwire", "_inflight_entry", "_tables"}


def test_the_definition_finder_sees_every_kind_of_definition(tmp_path: Path) -> None:
    """The check above cannot pass by seeing nothing: a definition of each kind counts."""
    text = "\n".join(
        (
            "cdef inline int request_end(int size) noexcept nogil:",
            "cpdef Py_ssize_t scan_requests(bytes buf) except -1:",
            "cdef class InFlightRequest:",
            "def answers(entry, int correlation_id):",
            "cdef bint _releases_local(list entries) except -1:",
        )
    )
    assert CYTHON_DEF.findall(text) == [
        "request_end",
        "scan_requests",
        "InFlightRequest",
        "answers",
        "_releases_local",
    ]


def test_an_inline_declaration_is_no_definition_and_an_inline_body_is() -> None:
    """A ``.pxd`` may mark a ``.py``'s function ``inline`` (a declaration: the body is the
    ``.py``'s); an ``inline`` function written in the ``.pxd`` is a second source."""
    text = "\n".join(
        (
            "cdef inline Py_ssize_t skip_tags(bytes_at buf, Py_ssize_t pos) noexcept nogil",
            "cdef inline bint releases_local(",
            "    list entries, Py_ssize_t after",
            ") except -1",
            "cdef inline int request_end(",
            "    int size, Py_ssize_t pos",
            ") noexcept nogil:  # a body follows",
            "    return pos + 4 + size",
        )
    )
    bodies = [m.group(1) for m in CYTHON_DEF.finditer(text) if has_body(text, m)]
    assert CYTHON_DEF.findall(text) == ["skip_tags", "releases_local", "request_end"]
    assert bodies == ["request_end"]


def test_the_compiled_build_and_the_plain_one_are_the_same_files() -> None:
    """Where the scanner is compiled, its modules are built from the files the plain
    build loads (one source): same functions, by name, in both."""
    for module in ("_scan", "_inflight_entry"):
        source = Path(plain(module).__file__ or "")
        assert source == GATEWAY / "protocol" / f"{module}.py"
    if _scanner.COMPILED:
        assert _scanner.scan.__file__ and not _scanner.scan.__file__.endswith(".py")
        for name in ("scan_requests", "match_responses", "tail_offset"):
            assert callable(getattr(_scanner.scan, name)) and callable(
                getattr(plain("_scan"), name)
            )
