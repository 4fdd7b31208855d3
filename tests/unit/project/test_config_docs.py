"""docs/configuration.md's reference and conf/gateway.toml are what the declarations say.

scripts/config-docs writes both from ``gateway.config.SETTINGS``; these tests fail when a
committed file differs from what it makes (a default, a choice or a reason changed in
gateway/config/ without running it), and show that the check sees such a change.
"""

from __future__ import annotations

import shutil
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.config import SETTINGS, Config, load_config
from gateway.config._declare import convert
from gateway.config.describe import default_value
from scripts import config_docs
from scripts.config_docs import BEGIN, END, EXAMPLE, EXAMPLE_SETS, REFERENCE, key_lines

ROOT = Path(__file__).resolve().parents[3]


def test_the_committed_files_are_what_the_declarations_make() -> None:
    diffs = config_docs.stale(ROOT)
    assert diffs == {}, "run scripts/config-docs:\n" + "".join(diffs.values())


def copy(tmp_path: Path) -> Path:
    for path in (REFERENCE, EXAMPLE):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    return tmp_path


@pytest.mark.parametrize(
    ("path", "committed", "drifted"),
    [
        # A default, a choice, a reason and a flag, in each file.
        (REFERENCE, "| `--listen` | 127.0.0.1:9092 |", "| `--listen` | 127.0.0.1:9093 |"),
        (REFERENCE, "one of `sidecar`, `cluster`", "one of `sidecar`"),
        (REFERENCE, "how long SIGTERM waits", "how long SIGINT waits"),
        (EXAMPLE, '# mode = "sidecar"', '# mode = "cluster"'),
        (EXAMPLE, "one of none, requested, required", "one of none, required"),
        (EXAMPLE, "flag --workers", "flag --worker"),
    ],
)
def test_check_fails_on_a_file_that_drifted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: Path, committed: str, drifted: str
) -> None:
    root = copy(tmp_path)
    text = (root / path).read_text()
    assert text.count(committed) == 1
    (root / path).write_text(text.replace(committed, drifted))
    assert config_docs.main(["--check"], root=root) == 1
    out = capsys.readouterr().out
    assert f"--- a/{path}" in out
    removed = [line for line in out.splitlines() if line.startswith("-") and drifted in line]
    added = [line for line in out.splitlines() if line.startswith("+") and committed in line]
    assert removed and added, out
    assert config_docs.main([], root=root) == 0
    assert (root / path).read_text() == text
    assert config_docs.main(["--check"], root=root) == 0


def test_the_script_rewrites_the_generated_part_and_keeps_the_prose(tmp_path: Path) -> None:
    root = copy(tmp_path)
    text = (root / REFERENCE).read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    (root / REFERENCE).write_text(f"{head}Prose of our own.\n{BEGIN}\nstale\n{END}{tail}")
    config_docs.main([], root=root)
    assert (root / REFERENCE).read_text() == text.replace(BEGIN, f"Prose of our own.\n{BEGIN}")
    (root / REFERENCE).write_text(head + tail)
    with pytest.raises(ValueError, match="markers"):
        config_docs.main(["--check"], root=root)


def test_every_key_has_a_row_with_its_flag_and_default() -> None:
    reference = (ROOT / REFERENCE).read_text()
    for key, declared in SETTINGS.items():
        (row,) = [line for line in reference.splitlines() if line.startswith(f"| `{key}` ")]
        flag = declared.setting.flag
        assert (f"| `{flag}` |" if flag else "|  |") in row, key


@pytest.mark.parametrize("key", sorted(SETTINGS))
def test_each_line_of_the_example_is_a_value_of_its_key(key: str) -> None:
    # Uncommented on its own, a key's line in conf/gateway.toml is a value of the key's
    # type (its checks that read files, e.g. a catalogue's, aside).
    declared = SETTINGS[key]
    table, name = declared.setting.table, declared.setting.name
    lines = key_lines(declared)
    example = (ROOT / EXAMPLE).read_text()
    prefix = "" if key in EXAMPLE_SETS else "# "
    assert all(f"\n{prefix}{line}\n" in example for line in lines), key
    if isinstance(default_value(declared), dict):
        value = tomllib.loads(f"[{table}.{name}]\n" + "\n".join(lines))[table][name]
    else:
        parsed = tomllib.loads("\n".join(lines))
        value = parsed[key if table is None else name]
    convert(key, declared.hint, value)


def test_the_example_sets_only_its_example_keys() -> None:
    examples = {
        key: convert(key, SETTINGS[key].hint, SETTINGS[key].setting.example) for key in EXAMPLE_SETS
    }
    assert load_config(ROOT / EXAMPLE) == replace(Config(), **examples)
