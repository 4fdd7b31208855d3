"""Which versions the bridge carries for an upstream, and to which version it converts.

Kafka 4.0 removed old versions of a dozen client APIs (KIP-896). The merged specs
(``gateway/data/kafka_messages.json``) say which: the versions whose newest spec is a
3.x release's. An upstream has applied KIP-896 when it no longer offers Fetch v0-3 (it
still advertises Produce v0-2, for old librdkafka builds that insist on seeing v0, but
closes the connection on them: KAFKA-18659); for such an upstream each removed version
of a bridged API is converted up to the lowest version it accepts. An upstream that
still offers them (3.9 and older) gets them as they are: the bridge does nothing. The
removed versions never pass through to a 4.x upstream: those it no longer advertises
fall outside the pass-through table, and Produce v0-2, which it still advertises, are
held back by ``versions.refused_below``.

Pure functions of the upstream's ApiVersions ranges, computed once per distinct answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ..protocol import api_name
from ..versions import VersionRange, removed_kip896
from . import messages
from .convert import CONVERSIONS

# The client APIs the bridge carries: every removed one but the inter-broker APIs (no
# client sends them), each declared in its module of ``gateway.bridge.apis``.
BRIDGED_APIS: tuple[int, ...] = tuple(CONVERSIONS)


@dataclass(frozen=True, slots=True)
class Bridged:
    """An API's versions the bridge carries: ``oldest`` up to ``target`` - 1, each sent
    upstream as ``target``."""

    oldest: int
    target: int

    def carries(self, version: int) -> bool:
        return self.oldest <= version < self.target


@cache
def removed() -> dict[int, VersionRange]:
    """API key → the versions Kafka 4.0 removed (their newest spec is a 3.x release's)."""
    out: dict[int, VersionRange] = {}
    for key in BRIDGED_APIS:
        for entry in messages._specs().get(f"{api_name(key)}Request", ()):
            if not entry["release"].startswith(("0.", "1.", "2.", "3.")):
                continue
            low, high = entry["versions"]
            known = out.get(key)
            out[key] = (low, high) if known is None else (min(low, known[0]), max(high, known[1]))
    return out


# The last upstream asked about and its answer: every connection to one upstream shares
# its ranges dict (``Negotiated``), so a held-back request costs one identity check.
_last: tuple[dict[int, VersionRange], dict[int, Bridged]] | None = None


def plans(upstream: dict[int, VersionRange]) -> dict[int, Bridged]:
    """API key → what the bridge carries for a connection to this upstream (empty for an
    upstream that accepts every version)."""
    global _last
    last = _last
    if last is not None and last[0] is upstream:
        return last[1]
    found = _plans(tuple(sorted(upstream.items())))
    _last = (upstream, found)
    return found


@cache
def _plans(upstream: tuple[tuple[int, VersionRange], ...]) -> dict[int, Bridged]:
    ranges = dict(upstream)
    if not removed_kip896(ranges):
        return {}
    out: dict[int, Bridged] = {}
    for key, (low, high) in removed().items():
        offered = ranges.get(key)
        if offered is None:
            continue
        target = max(offered[0], high + 1)
        if target <= offered[1]:
            out[key] = Bridged(low, target)
    return out


def widen(
    ranges: dict[int, VersionRange], upstream: dict[int, VersionRange]
) -> dict[int, VersionRange]:
    """``ranges`` as told to a client the bridge serves: each bridged API from its oldest
    version (a new dict; ``ranges`` is shared by every connection to the upstream)."""
    bridged = plans(upstream)
    if not bridged:
        return ranges
    out = dict(ranges)
    for key, plan in bridged.items():
        told = out.get(key)
        if told is not None:
            out[key] = (min(told[0], plan.oldest), told[1])
    return out
