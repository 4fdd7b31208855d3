"""The version bridge: old clients carried across Kafka 4 (``gateway.bridge``).

``bridge_old_clients`` at the top level of the TOML file, the rules in [bridge].
"""

# setting() is a dataclasses.field with metadata; ruff only knows field() itself as one.
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from ..bridge.policy import parse_rule, read_rules_file
from ._declare import Shape, parsed_by, setting

Rules = Annotated[
    tuple[str, ...],
    Shape("a list of 'MATCH... -> bridge|refuse|cap LIMITS' rules", item_parse=parse_rule),
]


@dataclass(frozen=True)
class Bridge:
    """The version bridge."""

    __slots__ = ()

    bridge_old_clients: bool = setting(
        True,
        see="protocol.md#the-version-bridge",
        why="carry requests at versions the upstream removed (Kafka 4.0, KIP-896) by "
        "converting them up and the answers down; off: they are refused as Kafka 4 does",
    )
    bridge_policy: Rules = setting(
        (),
        table="bridge",
        name="policy",
        example=("client_id=^legacy-billing -> refuse", "principal=User:batch -> bridge"),
        see="configuration.md#bridge-policy-rules",
        why="per-client exceptions, first match wins: 'client_id=REGEX software=NAME "
        "version=<2.0 principal=User:x -> bridge|refuse|cap Fetch=2,Produce=1|cap 0.10'",
    )
    bridge_policy_file: str | None = setting(
        None,
        table="bridge",
        name="policy_file",
        check=parsed_by(read_rules_file),
        example="/etc/kafka-gateway/bridge-policy.txt",
        see="operations.md#live-reload-sighup",
        why="more rules, one a line, read again on SIGHUP (a file that does not load keeps "
        "the rules before it); they come before [bridge] policy's",
    )
