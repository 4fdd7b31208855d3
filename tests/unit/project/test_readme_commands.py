"""Every command README.md and docs/*.md show can be pasted into a new shell in the
repository root.

scripts/run installs the project into .venv without activating it, so the docs write the
project's commands as `.venv/bin/featurectl ...`. These checks read every shell block (and
every inline command in the prose) of every page, so a page or section added later is held
to the same rule: each command is found by a new shell, none is a bare name only an activated
virtualenv knows, and the project's own parser accepts the arguments. The walkthrough is
also run against a live stack (tests/integration/test_first_run.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.harness.shell import (
    PROJECT_MODULES,
    PROJECT_PARSERS,
    ROOT,
    command_problem,
    iter_words,
    markdown_shell_blocks,
    simple_commands,
    venv_only,
)

README = ROOT / "README.md"
# The README and every page under docs/: each is checked as the README is.
DOCS = [README, *sorted((ROOT / "docs").glob("**/*.md"))]
# `code` spans in the prose; a span may wrap onto the next line.
_INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+(?:\n[^`\n]+)?)`(?!`)")


def readme_commands(path: Path = README) -> list[tuple[int, str, list[str]]]:
    """(line of the block, command line, words) for each simple command in shell blocks."""
    return [
        (block.line, line, words)
        for block in markdown_shell_blocks(path.read_text())
        for line, words in iter_words(block.lines)
    ]


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_readme_has_shell_blocks_with_project_commands() -> None:
    # Guards the checks below against a parser that silently finds nothing.
    words = [w[0] for _, _, w in readme_commands()]
    assert "scripts/run" in words and "scripts/test" in words
    assert ".venv/bin/featurectl" in words and ".venv/bin/kafka-gateway" in words


def test_the_docs_pages_are_read_too() -> None:
    assert len(DOCS) > 1, "no page under docs/"
    words = {w[0] for path in DOCS[1:] for _, _, w in readme_commands(path)}
    assert ".venv/bin/featurectl" in words and ".venv/bin/kafka-gateway" in words


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_every_shell_block_command_runs_when_pasted_from_the_repository_root(
    path: Path,
) -> None:
    problems = [
        f"{_name(path)} block at line {block}: {line}\n    {problem}"
        for block, line, words in readme_commands(path)
        if (problem := command_problem(words)) is not None
    ]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_inline_project_commands_use_the_pasteable_form(path: Path) -> None:
    # Prose spans may be synopses (`--out DIR [--once]`), so only the command word is
    # checked: a project command written bare is "command not found" when pasted. A span
    # with options is an invocation; one without (`featurectl plan`) names a command.
    problems = []
    for span in _INLINE_CODE.findall(path.read_text()):
        for words in simple_commands(span.replace("\n", " ")):
            module = words[2] if words[1:2] == ["-m"] and len(words) > 2 else None
            bare_python = words[0].startswith("python") and module in PROJECT_MODULES
            invocation = any(w.startswith("-") for w in words[1:])
            if invocation and (venv_only(words[0]) or bare_python):
                problems.append(f"{_name(path)}: `{span}`: write .venv/bin/{words[0]}")
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    "block, expected",
    [
        ("featurectl describe --zookeeper zk:2181", "runs only in an activated virtualenv"),
        ("kafka-gateway --help", "runs only in an activated virtualenv"),
        ("python -m gateway --listen :9092", ".venv/bin/python"),
        (".venv/bin/featurectl finalize --feature group.version=1 [--dry-run]", "rejects"),
        (".venv/bin/kafka-gateway ... --tls-ca ca.pem", "rejects"),
        (".venv/bin/no-such-tool", "has no no-such-tool"),
        ("scripts/no-such-script", "finds no such command"),
        ("echo hi | no-such-command-anywhere -x", "finds no such command"),
    ],
)
def test_the_checks_catch_what_a_new_shell_would_refuse(
    tmp_path: Path, block: str, expected: str
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"Try:\n\n```sh\nscripts/run\n{block}   # a comment\n```\n")
    problems = [p for _, _, w in readme_commands(readme) if (p := command_problem(w))]
    assert len(problems) == 1 and expected in problems[0], problems


def test_the_project_commands_have_parsers_for_their_arguments() -> None:
    # A new console script in pyproject.toml needs an entry here, or its lines in the docs
    # would only be checked for existence. Apache Kafka's own tools (gateway/kafka_tools.py)
    # are the exception: Kafka's Java classes parse their arguments.
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    ours = {
        name for name, target in scripts.items() if not target.startswith("gateway.kafka_tools:")
    }
    assert ours == set(PROJECT_PARSERS)


# "# Run:  COMMAND  (...)" in a config file's header: the command, up to two spaces.
_RUN_COMMENT = re.compile(r"^#\s*Run:\s+(?P<command>.+?)(?:\s{2,}|$)", re.MULTILINE)


def test_config_files_say_how_to_run_them_in_the_pasteable_form() -> None:
    commands = [
        (path, line)
        for path in sorted((ROOT / "conf").glob("*.toml"))
        for line in _RUN_COMMENT.findall(path.read_text())
    ]
    assert [_name(path) for path, _ in commands] == ["conf/gateway.toml"]
    problems = [
        f"{_name(path)}: {line}\n    {problem}"
        for path, line in commands
        for words in simple_commands(line)
        if (problem := command_problem(words)) is not None
    ]
    assert problems == [], "\n".join(problems)
