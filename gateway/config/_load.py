"""``load_config``: the TOML file, then flags on top, converted and validated once."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from ._declare import ConfigError, convert
from ._schema import SETTINGS, Config
from ._validate import validate

# (table, name there) -> key, from the declarations: [tls] cert is tls_cert.
_IN_TABLE = {
    (d.setting.table, d.setting.name): key for key, d in SETTINGS.items() if d.setting.table
}
_TABLES = {table for table, _ in _IN_TABLE}
# The file and flags this process's config was loaded from, for the settings SIGHUP
# reads again (``reloaded``). Workers start from the fork server, not from the process
# that loaded it: the supervisor hands it on (``config_source``, ``remember_source``).
Source = tuple[str | Path | None, dict[str, Any] | None]
_source: Source = (None, None)


def config_source() -> Source:
    """The file and flags of the last ``load_config`` in this process."""
    return _source


def remember_source(source: Source) -> None:
    """A worker's config came from ``source`` (its supervisor's ``config_source``)."""
    global _source
    _source = source


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Read ``path`` (TOML) if given, apply ``overrides`` (flags, None = not given), validate."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError("--config", f"file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("--config", f"{path} is not valid TOML: {exc}") from None
    raw = _flatten(raw)
    for key, value in (overrides or {}).items():
        if value is not None:
            raw[key] = value
    unknown = sorted(set(raw) - SETTINGS.keys())
    if unknown:
        known = ", ".join(sorted(SETTINGS))
        raise ConfigError(unknown[0], f"unknown setting (known: {known})")
    values = {key: convert(key, SETTINGS[key].hint, value) for key, value in raw.items()}
    cfg = replace(Config(), **values)
    validate(cfg)
    remember_source((path, overrides))
    return cfg


def reloaded(key: str, current: Any) -> Any:
    """``key``'s value as the config file this process started with says it now (SIGHUP),
    flags still winning; ``current`` when no file was given. ConfigError when the file
    no longer loads (the caller keeps ``current``)."""
    path, overrides = _source
    if path is None:
        return current
    return getattr(load_config(path, overrides), key)


def _flatten(raw: dict[str, Any]) -> dict[str, Any]:
    """The documented table layout ([log] level = ...) as flat keys (log_level)."""
    flat = dict(raw)
    for table in sorted(_TABLES & raw.keys()):
        section = flat.pop(table)
        if not isinstance(section, dict):
            raise ConfigError(table, "expected a table")
        for name, value in section.items():
            key = _IN_TABLE.get((table, name))
            if key is None:
                raise ConfigError(f"{table}.{name}", f"unknown setting in [{table}]")
            flat[key] = value
    return flat
