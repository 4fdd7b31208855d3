"""The configuration reference (docs/configuration.md) stays in step with the config schema."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from gateway.config import Config

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_every_config_key_is_in_the_configuration_reference_and_nothing_else() -> None:
    text = REFERENCE.read_text()
    section = text.split("\n## Reference\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_]+)`", section, re.MULTILINE))
    assert documented == {f.name for f in fields(Config)}
