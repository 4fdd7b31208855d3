"""A bridged request up to the upstream's version and its answer back down: the one place
the bridge changes bytes. Sans-I/O.

Every bridged API converts field by field (``messages.convert``: the spec's defaults for
what the older version lacks, what the newer one lacks left out); what an API needs
beyond that is its ``Conversion``, declared in its own module of ``gateway.bridge.apis``
(Produce's message sets up, Fetch's down, ListOffsets v0's list of offsets, the admin
v0s' meanings).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import declared
from ..protocol import api_name
from . import apis, messages
from .conversion import Conversion

# API key → its conversion: the APIs the bridge carries.
CONVERSIONS: dict[int, Conversion] = {
    c.api_key: c for c in declared.discover(apis, "CONVERSION", Conversion)
}


@dataclass(slots=True)
class Answer:
    body: bytes
    headers_dropped: int = 0


@dataclass(slots=True)
class Upward:
    """A request converted up: its body at the target version, whether it is answered
    (Produce acks=0 is not), and how to bring the answer down."""

    body: bytes
    awaited: bool
    down: Callable[[bytes | memoryview], Answer]


def request_up(api_key: int, version: int, target: int, body: bytes | memoryview) -> Upward:
    """``body`` (a request of ``api_key`` at ``version``) at ``target``, and its answer's
    way back. Raises ``messages.Malformed`` or ``records.RecordsError`` on a request it
    cannot read."""
    conversion = CONVERSIONS[api_key]
    name = f"{api_name(api_key)}Request"
    values = messages.decode(name, version, body, strict=False, keep_unknown=False)
    awaited = conversion.answered is None or conversion.answered(values)
    state = conversion.up(values) if conversion.up is not None else None
    up = messages.encode(name, target, values)

    def down(answer: bytes | memoryview) -> Answer:
        return response_down(api_key, target, version, answer, state)

    return Upward(up, awaited, down)


def response_down(
    api_key: int, source: int, version: int, body: bytes | memoryview, state: Any = None
) -> Answer:
    """An answer at ``source`` as the client's ``version`` expects it; ``state``: what
    the API's ``up`` returned for the request (a Fetch's offsets and byte limits)."""
    conversion = CONVERSIONS[api_key]
    name = f"{api_name(api_key)}Response"
    values = messages.decode(name, source, body, strict=False, keep_unknown=False)
    dropped = conversion.down(values, version, state) if conversion.down is not None else 0
    return Answer(messages.encode(name, version, values), dropped)
