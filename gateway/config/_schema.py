"""``Config``: every key of every concept in one flat, frozen object.

Readers say ``config.<key>``; the keys are declared, grouped by concept, in the classes
Config inherits from, and ``SETTINGS`` is what those declarations say about each key.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, get_type_hints

from ._declare import Setting
from .addresses import Addresses
from .bridge import Bridge
from .features import Features
from .limits import Limits
from .observability import Observability
from .processes import Processes
from .tls import Tls
from .upstream import Upstream


# Listed last concept first: a dataclass orders inherited fields from the last base.
@dataclass(frozen=True, slots=True)
class Config(Bridge, Observability, Processes, Limits, Tls, Features, Upstream, Addresses):
    """The gateway's validated settings (``load_config`` makes one from file and flags)."""


@dataclass(frozen=True, slots=True)
class Declared:
    """One key as declared: its type (the annotation) and the rest (``Setting``)."""

    key: str
    hint: Any
    setting: Setting
    # The class that declares it (Addresses, Tls, ...): its concept.
    concept: type

    @property
    def toml(self) -> str:
        return self.setting.toml(self.key)


_HINTS = get_type_hints(Config, include_extras=True)
_CONCEPT = {key: base for base in Config.__mro__ for key in vars(base).get("__annotations__", {})}
#: Every key, in declaration order (by concept).
SETTINGS: dict[str, Declared] = {
    f.name: Declared(f.name, _HINTS[f.name], f.metadata["setting"], _CONCEPT[f.name])
    for f in fields(Config)
}
