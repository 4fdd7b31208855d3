"""The README's configuration reference stays in step with the config schema."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from gateway.config import Config

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_config_key_is_in_the_readme_reference_and_nothing_else() -> None:
    text = README.read_text()
    section = text.split("## Configuration reference", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_]+)`", section, re.MULTILINE))
    assert documented == {f.name for f in fields(Config)}
