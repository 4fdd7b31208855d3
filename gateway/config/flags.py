"""The command-line flags, made from the declarations.

Each key declared with a ``flag`` becomes an option whose type, choices, value name and
help (what it does, its default, its place in the TOML file) follow from that
declaration, in a group per concept; ``overrides`` reads the parsed flags back as keys
for ``load_config``. A flag left out is None: the file's value, or the default, stands.
"""

from __future__ import annotations

import argparse
from typing import Any, get_origin

from ._declare import ConfigError, HostPort, unwrap
from ._schema import SETTINGS, Declared
from .describe import choices, default_text


def flag_dest(flag: str) -> str:
    """The attribute argparse stores ``flag`` under."""
    return flag.removeprefix("--").replace("-", "_")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """An option for every key declared with a flag, grouped by concept."""
    groups: dict[type, Any] = {}
    for declared in SETTINGS.values():
        flag = declared.setting.flag
        if flag is None:
            continue
        if declared.concept not in groups:
            groups[declared.concept] = parser.add_argument_group(_title(declared.concept))
        groups[declared.concept].add_argument(flag, **option(declared))


def option(declared: Declared) -> dict[str, Any]:
    """``add_argument``'s keywords for a key's flag."""
    hint, _ = unwrap(declared.hint)
    # argparse formats help with "%": a literal one is "%%".
    help_text = flag_help(declared).replace("%", "%%")
    if hint is bool:
        return {"action": argparse.BooleanOptionalAction, "default": None, "help": help_text}
    kwargs: dict[str, Any] = {"help": help_text}
    listed = choices(declared)
    if listed is not None:
        kwargs["choices"] = listed
    else:
        kwargs["metavar"] = declared.setting.metavar or _metavar(hint)
    if hint is int or hint is float:
        kwargs["type"] = hint
    if get_origin(hint) is dict:
        kwargs["action"] = "append"
    return kwargs


def flag_help(declared: Declared) -> str:
    """What the flag does, its default and where the config file sets it."""
    repeat = "; repeat it per node" if get_origin(unwrap(declared.hint)[0]) is dict else ""
    return (
        f"{declared.setting.why}{repeat} "
        f"(default: {default_text(declared)}; config file: {_toml_place(declared)})"
    )


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed flags as config keys (None: not given). A node table's flags are
    "NODE=HOST:PORT", repeated, and become the table the file would hold."""
    out: dict[str, Any] = {}
    for key, declared in SETTINGS.items():
        flag = declared.setting.flag
        if flag is None:
            continue
        value = getattr(args, flag_dest(flag))
        if get_origin(unwrap(declared.hint)[0]) is dict:
            value = _node_table(flag, value)
        out[key] = value
    return out


def _node_table(flag: str, values: list[str] | None) -> dict[str, str] | None:
    """Repeated NODE=HOST:PORT flags as the config file's table (validated there)."""
    if values is None:
        return None
    table = {}
    for value in values:
        node, sep, address = value.partition("=")
        if not sep:
            raise ConfigError(flag, f"expected NODE=HOST:PORT, got {value!r}")
        table[node] = address
    return table


def _title(concept: type) -> str:
    """ "TLS ([tls], [sasl], [upstream_tls] in the config file)": the concept's name."""
    tables = [d.setting.table for d in SETTINGS.values() if d.concept is concept]
    places = ["the top level"] if None in tables else []
    places += [f"[{t}]" for t in dict.fromkeys(tables) if t is not None]
    return f"{(concept.__doc__ or '').strip().rstrip('.')}: {', '.join(places)} of the config file"


def _toml_place(declared: Declared) -> str:
    setting = declared.setting
    return declared.key if setting.table is None else f"[{setting.table}] {setting.name}"


def _metavar(hint: Any) -> str:
    if hint is HostPort:
        return "HOST:PORT"
    if get_origin(hint) is dict:
        return "NODE=HOST:PORT"
    if hint is int or hint is float:
        return "N"
    return "VALUE"
