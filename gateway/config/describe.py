"""What a declaration says, in words: its choices, its default, its value as TOML.

The flags' help (``flags``), the reference in docs/configuration.md and conf/gateway.toml
(both written by scripts/config-docs) all say a key's default and choices this way, from
its declaration alone, so none of them can state one the declaration does not.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, fields
from typing import Any, Literal, get_args, get_origin

from ._declare import HostPort, unwrap
from ._schema import Config, Declared

_FIELDS = {f.name: f for f in fields(Config)}


def choices(declared: Declared) -> tuple[str, ...] | None:
    """The values a key may take, when its type lists them (a ``Literal``)."""
    hint, _ = unwrap(declared.hint)
    return get_args(hint) if get_origin(hint) is Literal else None


def default_value(declared: Declared) -> Any:
    """The default as declared; MISSING when it is computed when Config is made (the
    CPUs, an environment variable), which only ``default_means`` can say."""
    f = _FIELDS[declared.key]
    if f.default_factory is dict:
        return {}
    return f.default


def literal(value: Any) -> str:
    """A value as an operator writes it: 127.0.0.1:9092, true, 10.0, ["User:ops"]."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, HostPort | int | float):
        return str(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(json.dumps(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {json.dumps(str(v))}" for k, v in value.items()) + "}"
    return str(value)


def default_text(declared: Declared) -> str:
    """The default in words: the value ("sidecar", "10.0"), what it means where there is
    no value to show ("the advertised host"), or both ("2147483647, no limit")."""
    value = default_value(declared)
    means = declared.setting.default_means
    if value is MISSING and means is None:
        raise TypeError(
            f"{declared.key}: a default computed when Config is made needs a default_means"
        )
    if value is MISSING or value in (None, {}, "", ()):
        return means or ("none" if value is None else literal(value) or '""')
    return f"{literal(value)}, {means}" if means else literal(value)


def toml_value(value: Any) -> str | None:
    """``value`` as TOML source; None when TOML cannot spell it (None, a computed one)."""
    if value is None or value is MISSING or isinstance(value, dict):
        return None
    if isinstance(value, bool | int | float | tuple | list):
        return literal(value)
    return json.dumps(str(value))
