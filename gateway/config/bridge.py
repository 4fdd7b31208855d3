"""The version bridge: old clients carried across Kafka 4 (``gateway.bridge``).

``bridge_old_clients`` at the top level of the TOML file, the rules in [bridge].
"""

# setting() is a dataclasses.field with metadata; ruff only knows field() itself as one.
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from ..bridge.policy import parse_rule
from ._declare import Shape, setting

Rules = Annotated[
    tuple[str, ...], Shape("a list of 'MATCH... -> bridge|refuse' rules", item_parse=parse_rule)
]


@dataclass(frozen=True)
class Bridge:
    """The version bridge."""

    __slots__ = ()

    bridge_old_clients: bool = setting(
        True,
        why="carry requests at versions the upstream removed (Kafka 4.0, KIP-896) by "
        "converting them up and the answers down; off: they are refused as Kafka 4 does",
    )
    bridge_policy: Rules = setting(
        (),
        table="bridge",
        name="policy",
        why="per-client exceptions, first match wins: 'client_id=REGEX software=NAME "
        "version=<2.0 principal=User:x -> bridge|refuse'",
    )
