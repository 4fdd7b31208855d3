"""The README stays a five-minute read, and the docs it points to can all be reached.

README.md is what a newcomer reads first: prerequisites, the two commands, the
walkthrough, then links. The reference lives in docs/, one page per task. So: the README
stays under 250 lines, every page under docs/ is linked from README.md or docs/README.md,
and every relative link in them (and its #anchor, for a markdown page) resolves.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("**/*.md"))
README_MAX_LINES = 250

_FENCED = re.compile(r"^[ \t]*```.*?^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _prose(text: str) -> str:
    """The text without code: a `[x](y)` in a shell block or code span is not a link."""
    return _INLINE_CODE.sub("", _FENCED.sub("", text))


def links(path: Path) -> list[str]:
    """The link targets in a markdown file's prose."""
    return _LINK.findall(_prose(path.read_text()))


def anchors(path: Path) -> set[str]:
    """The #anchors GitHub gives a markdown file's headings (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    result = set()
    for heading in _HEADING.findall(_FENCED.sub("", path.read_text())):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def local_target(source: Path, target: str) -> tuple[Path, str] | None:
    """(file, anchor) a relative link points to; None for a URL or a mail address."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return None
    file, _, anchor = target.partition("#")
    return (source.parent / file).resolve() if file else source, anchor


def test_the_readme_is_a_five_minute_read() -> None:
    lines = len(README.read_text().splitlines())
    assert lines < README_MAX_LINES, f"README.md has {lines} lines: move reference to docs/"


def test_every_docs_page_is_linked_from_the_readme_or_the_docs_index() -> None:
    assert PAGES, "no page under docs/"
    linked = set()
    for index in (README, DOCS / "README.md"):
        for target in links(index):
            if (found := local_target(index, target)) is not None:
                linked.add(found[0])
    unlinked = [_name(page) for page in PAGES if page.resolve() not in linked]
    unlinked = [page for page in unlinked if page != "docs/README.md"]
    assert unlinked == [], f"link these from README.md or docs/README.md: {unlinked}"
    assert (DOCS / "README.md").resolve() in linked, "README.md should link docs/README.md"


@pytest.mark.parametrize("page", [README, *PAGES], ids=_name)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        found = local_target(page, target)
        if found is None:
            continue
        file, anchor = found
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {_name(file)}")
    assert broken == [], f"{_name(page)}: " + "; ".join(broken)


@pytest.mark.parametrize(
    "heading, anchor",
    [
        ("Live reload (SIGHUP)", "live-reload-sighup"),
        ("Principals, authorization and audit", "principals-authorization-and-audit"),
        ("Feature gating (KIP-584)", "feature-gating-kip-584"),
        ("The `kafka-*` tools", "the-kafka--tools"),
    ],
)
def test_anchors_are_githubs(tmp_path: Path, heading: str, anchor: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\n## {heading}\n\n```sh\n# not a heading\n```\n")
    assert anchors(page) == {"title", anchor}
