"""The feature catalogue: which API versions each finalized feature level enables.

Pure data and functions (no I/O besides reading the TOML file). Three questions are
answered here, the same way for the gateway, ``featurectl`` and the planner:

* ``supported(catalogue, available)``: the levels a gateway can serve, given the API
  ranges available to it (its own codec ∩ its upstream). Level L is supported when the
  catalogue lists every level up to L and each gated API version up to L is available.
  The minimum is always 0 (a feature can always be left disabled), as Kafka 4.x reports.
* ``version_caps(catalogue, finalized)``: per API key the highest version the finalized
  levels allow, fed to ``versions.negotiate``. A gate "Produce>=12" at an unfinalized
  level caps Produce at 11; a whole-API gate caps it below its lowest version, which
  removes the key.
* ``required_level(catalogue, key, version)``: which feature level a request needs
  (for the planner and for log lines about withheld versions).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from ..protocol import api_key_of, api_name

VersionRange = tuple[int, int]

_GATE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9]*|\d+)\s*(?:>=\s*(\d+))?\s*$")


class CatalogueError(ValueError):
    """The catalogue file is not valid; the message names the feature and level."""


@dataclass(frozen=True, slots=True)
class Gate:
    """Versions ``min_version`` and up of ``api_key`` need a feature level."""

    api_key: int
    min_version: int

    def __str__(self) -> str:
        name = api_name(self.api_key)
        return name if self.min_version == 0 else f"{name}>={self.min_version}"


@dataclass(frozen=True, slots=True)
class FeatureSpec:
    name: str
    description: str
    # levels[i] holds the gates of level i + 1.
    levels: tuple[tuple[Gate, ...], ...]

    @property
    def max_level(self) -> int:
        return len(self.levels)

    def gates_up_to(self, level: int) -> Iterable[tuple[int, Gate]]:
        for index, gates in enumerate(self.levels[:level]):
            for gate in gates:
                yield index + 1, gate


Catalogue = Mapping[str, FeatureSpec]


def default_catalogue_path() -> Path:
    return Path(str(resources.files("gateway").joinpath("data/features.toml")))


def load_catalogue(path: str | Path | None = None) -> dict[str, FeatureSpec]:
    """Read and validate a catalogue file (the built-in one when ``path`` is None)."""
    if path is None:
        return dict(_builtin_catalogue())
    return _read_catalogue(Path(path))


@cache
def _builtin_catalogue() -> dict[str, FeatureSpec]:
    # The package's own file, read once per process: it changes only with the package,
    # which a restart picks up anyway. The workers' fork server reads it before it forks
    # (worker_preload.py): parsing the TOML in each worker copied ~1 MB of shared pages.
    return _read_catalogue(default_catalogue_path())


def _read_catalogue(path: Path) -> dict[str, FeatureSpec]:
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise CatalogueError(f"feature catalogue {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"feature catalogue {path} is not valid TOML: {exc}") from None
    return parse_catalogue(raw, str(path))


def parse_catalogue(raw: Mapping[str, object], source: str = "catalogue") -> dict[str, FeatureSpec]:
    features = raw.get("features", {})
    if not isinstance(features, dict):
        raise CatalogueError(f"{source}: [features] must be a table")
    out: dict[str, FeatureSpec] = {}
    for name, body in features.items():
        where = f"{source}: feature {name!r}"
        if not name or not isinstance(body, dict):
            raise CatalogueError(f"{where}: expected a table with 'levels'")
        levels_raw = body.get("levels", {})
        if not isinstance(levels_raw, dict):
            raise CatalogueError(f"{where}: 'levels' must be a table of level = [gates]")
        try:
            numbers = sorted(int(level) for level in levels_raw)
        except ValueError:
            raise CatalogueError(f"{where}: levels are integers >= 1") from None
        if numbers != list(range(1, len(numbers) + 1)):
            raise CatalogueError(f"{where}: levels must be 1..N without gaps, got {numbers}")
        levels = []
        for number in numbers:
            gates = levels_raw[str(number)]
            if not isinstance(gates, list):
                raise CatalogueError(f"{where} level {number}: expected a list of gates")
            levels.append(tuple(_parse_gate(f"{where} level {number}", g) for g in gates))
        description = body.get("description", "")
        out[name] = FeatureSpec(name, str(description), tuple(levels))
    return out


def _parse_gate(where: str, text: object) -> Gate:
    match = _GATE.match(text) if isinstance(text, str) else None
    if match is None:
        raise CatalogueError(f"{where}: gate {text!r} is not 'ApiName' or 'ApiName>=VERSION'")
    api, version = match.group(1), int(match.group(2) or 0)
    key = int(api) if api.isdigit() else api_key_of(api)
    if key is None:
        raise CatalogueError(f"{where}: unknown API {api!r}")
    return Gate(key, version)


def gate_available(gate: Gate, available: Mapping[int, VersionRange]) -> bool:
    rng = available.get(gate.api_key)
    return rng is not None and rng[1] >= gate.min_version


def supported(
    catalogue: Catalogue, available: Mapping[int, VersionRange]
) -> dict[str, VersionRange]:
    """Per feature the (0, max) levels servable with the ``available`` API ranges."""
    out: dict[str, VersionRange] = {}
    for name, spec in catalogue.items():
        level = 0
        for gates in spec.levels:
            if not all(gate_available(g, available) for g in gates):
                break
            level += 1
        out[name] = (0, level)
    return out


def missing_for(spec: FeatureSpec, level: int, available: Mapping[int, VersionRange]) -> list[Gate]:
    """The gates up to ``level`` that ``available`` cannot serve (why a level is unsupported)."""
    return [g for _, g in spec.gates_up_to(level) if not gate_available(g, available)]


def version_caps(catalogue: Catalogue, finalized: Mapping[str, int]) -> dict[int, int]:
    """Per API key the highest version the finalized levels allow (see module doc)."""
    caps: dict[int, int] = {}
    for name, spec in catalogue.items():
        level = finalized.get(name, 0)
        for gates in spec.levels[level:]:
            for gate in gates:
                cap = gate.min_version - 1
                caps[gate.api_key] = min(caps.get(gate.api_key, cap), cap)
    return caps


def required_level(catalogue: Catalogue, api_key: int, version: int) -> tuple[str, int] | None:
    """The (feature, level) a request of this key and version needs, None if ungated.

    When several gates apply, the highest level of the first feature found wins; the
    default catalogue gates each API under one feature only.
    """
    for name, spec in catalogue.items():
        found = 0
        for level, gate in spec.gates_up_to(spec.max_level):
            if gate.api_key == api_key and version >= gate.min_version:
                found = max(found, level)
        if found:
            return name, found
    return None


__all__ = [
    "Catalogue",
    "CatalogueError",
    "FeatureSpec",
    "Gate",
    "default_catalogue_path",
    "load_catalogue",
    "missing_for",
    "parse_catalogue",
    "required_level",
    "supported",
    "version_caps",
]
