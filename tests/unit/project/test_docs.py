"""The configuration reference (docs/configuration.md) stays in step with the config schema."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from gateway.config import SETTINGS, Config, Declared

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
ROW = re.compile(r"^\| `([a-z_]+)`(?: \(`([^`]+)`\))? \|", re.MULTILINE)


def reference() -> str:
    text = REFERENCE.read_text()
    return text.split("\n## Reference\n", 1)[1].split("\n## ", 1)[0]


def toml_form(declared: Declared) -> str | None:
    """How the reference writes a key's table: ``[tls] cert``, or ``[sidecar.peers]`` for
    a key that is a table itself; None for a key of the top level."""
    setting = declared.setting
    if setting.table is None:
        return None
    if isinstance(getattr(Config(), declared.key), dict):
        return f"[{setting.table}.{setting.name}]"
    return f"[{setting.table}] {setting.name}"


def test_every_config_key_is_in_the_configuration_reference_and_nothing_else() -> None:
    documented = [m.group(1) for m in ROW.finditer(reference())]
    assert sorted(documented) == sorted(f.name for f in fields(Config))


def test_each_row_gives_the_toml_table_its_key_is_declared_in() -> None:
    for match in ROW.finditer(reference()):
        key, form = match.groups()
        assert form == toml_form(SETTINGS[key]), key


def test_a_key_read_from_the_environment_by_default_says_which_variable() -> None:
    rows = {
        m.group(1): reference()[m.start() :].partition("\n")[0] for m in ROW.finditer(reference())
    }
    for key, declared in SETTINGS.items():
        if declared.setting.env is not None:
            assert f"`${declared.setting.env}" in rows[key], key


def test_each_key_is_documented_under_its_concept() -> None:
    # "### Listeners and addresses" holds the keys gateway.config.addresses declares.
    for part in reference().split("\n### ")[1:]:
        title, _, rows = part.partition("\n")
        for match in ROW.finditer(rows):
            concept = SETTINGS[match.group(1)].concept
            assert (concept.__doc__ or "").strip().rstrip(".") == title, match.group(1)
