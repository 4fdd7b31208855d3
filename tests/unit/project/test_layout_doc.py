"""docs/layout.md is true of the tree: every package and module placed, nothing stale.

The page names modules in code spans under the heading of their folder ("## `gateway/`",
"### `gateway/server/`"): a span is read relative to that folder, else to the repository
root, and may be a glob (`handover*.py`). Its list of the modules that open sockets is
checked against the source: a module calling one of the socket-making functions below
must be listed, and a listed one must call one. A socket made by a call not in that list
escapes the check; the list names every way the code base makes one today.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "layout.md"
TREES = ("gateway", "featurectl", "scripts")
MODULE_SUFFIXES = {".py", ".pyx", ".pxd", ".java"}

_HEADING = re.compile(r"^#{1,6} ")
_BASE = re.compile(r"`((?:gateway|featurectl|scripts)/(?:[\w.-]+/)*)`")
_SPAN = re.compile(r"`([^`\s]+)`")
# A span that names a file or folder: with a slash (not leading: `/metrics` is an HTTP
# path), or a file name of a kind the tree has.
_PATHLIKE = re.compile(r"^[\w.*-]+/[\w./*-]*$|^[\w*-][\w.*-]*\.(?:py|pyx|pxd|java|json|toml)$")
# How the code base makes a socket: the socket module, asyncio, urllib, kazoo.
SOCKET_CALLS = re.compile(
    r"socket\.(?:socket|socketpair|fromfd|create_connection)\("
    r"|\.create_server\(|\.create_connection\(|asyncio\.(?:start_server|open_connection)\("
    r"|urlopen\(|KazooClient\("
)


def sections() -> list[tuple[Path, str]]:
    """(the folder a section's spans are relative to, its text), by heading."""
    out: list[tuple[Path, str]] = []
    base, lines = ROOT, []
    for line in PAGE.read_text().splitlines():
        if _HEADING.match(line):
            out.append((base, "\n".join(lines)))
            found = _BASE.search(line)
            base, lines = (ROOT / found.group(1) if found else ROOT), []
        lines.append(line)
    out.append((base, "\n".join(lines)))
    return out


def mentions() -> tuple[set[Path], list[str]]:
    """What the page names (files and folders), and the spans that name nothing."""
    named: set[Path] = set()
    stale: list[str] = []
    for base, text in sections():
        for span in _SPAN.findall(text):
            if not _PATHLIKE.match(span):
                continue
            matches = {
                path
                for folder in (base, ROOT)
                for path in folder.glob(span.rstrip("/") or ".")
                if "__pycache__" not in path.parts
            }
            if not matches:
                stale.append(f"{base.relative_to(ROOT)}: `{span}`")
            named |= matches
    return named, stale


def modules() -> list[Path]:
    """Every package and module of the trees (``__init__.py`` is its package's)."""
    found: list[Path] = [ROOT / tree for tree in TREES]
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            if "__pycache__" in path.parts:
                continue
            package = path.is_dir() and (path / "__init__.py").exists()
            if package or (path.suffix in MODULE_SUFFIXES and path.name != "__init__.py"):
                found.append(path)
    # scripts/run, scripts/test, ...: the commands.
    found += [p for p in (ROOT / "scripts").iterdir() if p.is_file() and not p.suffix]
    return found


def test_every_package_and_module_is_placed() -> None:
    named, _ = mentions()
    missing = [str(path.relative_to(ROOT)) for path in modules() if path not in named]
    assert missing == [], "not in docs/layout.md: " + ", ".join(missing)


def test_every_file_the_page_names_exists() -> None:
    _, stale = mentions()
    assert stale == [], "docs/layout.md names what is not there: " + ", ".join(stale)


def socket_section() -> str:
    """The list of the modules that make sockets themselves."""
    (text,) = [t for _, t in sections() if t.startswith("## Sockets")]
    return text.partition("make sockets themselves")[2].partition("These connect only")[0]


def test_the_modules_said_to_open_sockets_are_those_that_do() -> None:
    listed = {span for span in _SPAN.findall(socket_section()) if span.endswith((".py", ".pyx"))}
    opening = {
        str(path.relative_to(ROOT))
        for tree in TREES
        for path in sorted((ROOT / tree).rglob("*.py*"))
        if path.suffix in (".py", ".pyx") and SOCKET_CALLS.search(path.read_text())
    }
    assert listed == opening


def test_the_stated_longest_module_is_true() -> None:
    stated = re.search(r"none is over (\d+) lines", PAGE.read_text())
    assert stated is not None
    longest = max(
        (len(p.read_text().splitlines()), str(p.relative_to(ROOT)))
        for tree in ("gateway", "featurectl")
        for p in (ROOT / tree).rglob("*.py")
    )
    assert longest[0] <= int(stated.group(1)), longest


def test_a_module_left_out_or_gone_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checks themselves: a page without one module's name, and with a name of none.
    page = tmp_path / "layout.md"
    page.write_text(PAGE.read_text().replace("`upstream_watch.py`", "`upstream_gone.py`"))
    monkeypatch.setattr(sys.modules[__name__], "PAGE", page)
    named, stale = mentions()
    assert ROOT / "gateway/server/upstream_watch.py" not in named
    assert stale == ["gateway/server: `upstream_gone.py`"]
