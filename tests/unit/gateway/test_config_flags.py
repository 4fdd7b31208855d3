"""kafka-gateway's flags are the declarations': type, choices, help and default from each."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

import pytest

from gateway.cli import build_parser
from gateway.config import SETTINGS, Config, load_config
from gateway.config._declare import convert, unwrap
from gateway.config.describe import choices, default_text
from gateway.config.flags import flag_dest, overrides

FLAGGED = sorted(key for key, d in SETTINGS.items() if d.setting.flag)


def action(key: str) -> argparse.Action:
    flag = SETTINGS[key].setting.flag
    (found,) = [a for a in build_parser()._actions if flag in a.option_strings]
    return found


@pytest.mark.parametrize("key", FLAGGED)
def test_each_flag_says_what_it_does_its_default_and_its_toml_place(key: str) -> None:
    declared = SETTINGS[key]
    help_text = action(key).help or ""
    assert declared.setting.why in help_text
    assert f"(default: {default_text(declared)}; config file: " in help_text
    assert (declared.setting.table or key) in help_text.rpartition("config file: ")[2]


@pytest.mark.parametrize("key", FLAGGED)
def test_each_flag_takes_the_declared_choices_and_type_and_is_unset_by_default(key: str) -> None:
    declared, option = SETTINGS[key], action(key)
    assert option.default is None  # left out: the file's value or the default stands
    listed = choices(declared)
    assert (tuple(option.choices) if option.choices else None) == listed
    hint, _ = unwrap(declared.hint)
    if hint is bool:
        assert isinstance(option, argparse.BooleanOptionalAction)
    elif hint in (int, float):
        assert option.type is hint
    else:
        assert option.type is None  # a string, converted as the file's value is


def _flag_value(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [f"{node}={address}" for node, address in value.items()]
    if isinstance(value, bool):
        return []
    return [str(value)]


@pytest.mark.parametrize("key", FLAGGED)
def test_each_flag_sets_its_key_as_the_file_would(key: str) -> None:
    # The declared example (or the default), given as the flag, is the value the file's
    # spelling of it converts to.
    declared = SETTINGS[key]
    value = declared.setting.example
    if value is None:
        value = getattr(Config(), key)
        value = value if not isinstance(value, bool) else not value
    flag = declared.setting.flag
    assert flag is not None
    if isinstance(value, bool):
        argv = [flag if value else "--no-" + flag.removeprefix("--")]
    else:
        argv = [word for item in _flag_value(value) for word in (flag, item)]
    args = build_parser().parse_args(argv)
    file_value = {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else value
    assert convert(key, declared.hint, overrides(args)[key]) == convert(
        key, declared.hint, file_value
    )
    assert getattr(args, flag_dest(flag)) is not None


def test_flags_left_out_leave_the_defaults() -> None:
    args = build_parser().parse_args([])
    assert set(overrides(args)) == set(FLAGGED)
    assert load_config(None, overrides(args)) == Config()


def test_a_choice_not_declared_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(shlex.split("--log-level trace"))
    assert exit_info.value.code == 2
    assert "choose from 'debug', 'info', 'warning', 'error'" in capsys.readouterr().err
