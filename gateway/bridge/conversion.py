"""What a bridged API declares: one ``Conversion`` per API, by Kafka's name for it.

Every bridged request is converted field by field (``messages.convert``: the spec's
defaults for what the older version lacks, what the newer one lacks left out), and so is
its answer on the way down. A conversion says only what that does not cover:

* ``up``: the request's values, decoded at the client's version, changed in place before
  they are encoded at the upstream's (Produce v0-2's message sets become record
  batches); it returns what the way down needs to know (Fetch: each partition's offset
  and byte limit), or None;
* ``answered``: whether Kafka answers this request (a Produce with acks=0 it does not);
* ``down``: the answer's values, decoded at the upstream's version, changed in place to
  mean what Kafka's answer at the client's version meant; it returns how many record
  headers the client's version could not hold (dropped), or 0.

The declarations live one module per API in ``gateway.bridge.apis``; ``convert`` finds
them (a new bridged API is one new file) and ``plan`` bridges exactly those.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..protocol import api_key_of
from .messages import Message


@dataclass(frozen=True, slots=True)
class Conversion:
    # Kafka's name for the API ("OffsetCommit"), as its message specs spell it.
    api: str
    up: Callable[[Message], Any] | None = None
    answered: Callable[[Message], bool] | None = None
    # (the answer's values, the client's version, what ``up`` returned) → headers dropped.
    down: Callable[[Message, int, Any], int] | None = None
    api_key: int = field(init=False)

    def __post_init__(self) -> None:
        key = api_key_of(self.api)
        if key is None:
            raise ValueError(f"{self.api!r} is not one of Kafka's API names")
        object.__setattr__(self, "api_key", key)
