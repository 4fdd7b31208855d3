"""A level change reaches live connections: versions withdrawn, connections drained.

A Kafka client reads ApiVersions once per connection and keeps those versions for the
connection's life. When the finalized levels drop (``featurectl downgrade``/``disable``,
a catalogue reloaded with higher gates), a version the connection was told it may use is
answered UNSUPPORTED_VERSION from then on; librdkafka fails such records for good
instead of asking again (a producer left at Produce v10 after the level gating v10+ was
disabled: 70,159 failures in 30 s, none recovered; tests/integration/test_level_change.py
without this module), while a new connection would have been offered v9 and worked.

So after the gate's levels change, every connection is renegotiated, and those whose
ranges lost a version (what their client may have been told, against what a new
negotiation gives) are drained: the gateway stops reading their requests, answers every
one already forwarded, and closes. The client sees a connection close as after a broker
restart; it reconnects, asks ApiVersions and re-sends what went unanswered, the requests
it sent after the drain began included (the gateway neither read nor forwarded them); an
idempotent producer re-sends with the same sequence numbers, so nothing is lost or
doubled. Connections whose ranges lost nothing stay open. A broker whose own answer
changed drains its connections the same way (``upstream_recheck``, ``drain``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ..features.catalogue import Catalogue, required_level
from ..observability.logging import RateLimitedLogger, get_logger
from ..protocol import api_name
from ..versions import VersionRange

if TYPE_CHECKING:
    from .proxy import ClientConnection
    from .services import GatewayServices

log = get_logger("gateway.features")
limited = RateLimitedLogger("gateway.features")

# The reason labels of kafka_gateway_connections_renegotiated_total: a change of the
# finalized levels (or of the catalogue that maps them to versions), and a change of the
# connection's own upstream's ApiVersions answer (``upstream_recheck``).
FEATURE_LEVELS = "feature_levels"
UPSTREAM_ANSWER = "upstream_api_versions"


def withdrawn(
    before: Mapping[int, VersionRange], after: Mapping[int, VersionRange]
) -> dict[int, VersionRange]:
    """The versions ``before`` offered that ``after`` does not, by API key: (lowest,
    highest) of those lost (a gate is "versions N and up" or the whole API, so what a
    drop withdraws is the top of a range, or all of it). Versions ``after`` adds are no
    loss: the client does not know of them."""
    lost: dict[int, VersionRange] = {}
    for api_key, (low, high) in before.items():
        now = after.get(api_key)
        if now is None or now[0] > high or now[1] < low:
            lost[api_key] = (low, high)
        elif now[0] > low or now[1] < high:
            first = low if now[0] > low else now[1] + 1
            last = high if now[1] < high else now[0] - 1
            lost[api_key] = (first, last)
    return lost


def describe(lost: Mapping[int, VersionRange]) -> dict[str, str]:
    """Withdrawn versions for a log line: {"Produce": "v10-v11"}."""
    return {
        api_name(key): f"v{low}" if low == high else f"v{low}-v{high}"
        for key, (low, high) in sorted(lost.items())
    }


def gating_features(catalogue: Catalogue, lost: Mapping[int, VersionRange]) -> list[str]:
    """The features whose levels gate the withdrawn versions ("feature>=level")."""
    found = set()
    for api_key, (low, high) in lost.items():
        for version in range(low, high + 1):
            gate = required_level(catalogue, api_key, version)
            if gate is not None:
                found.add(f"{gate[0]}>={gate[1]}")
    return sorted(found)


def renegotiate_all(gateway: GatewayServices, connections: Iterable[ClientConnection]) -> int:
    """Renegotiate every connection with the gateway's current levels; drain those that
    lost a version. Returns how many were drained (also counted and logged)."""
    drained: list[ClientConnection] = []
    kept = 0
    lost_here: dict[int, VersionRange] = {}
    # Connections to one upstream share their ranges (Gateway.negotiated): compared once.
    compared: dict[tuple[int, int], dict[int, VersionRange]] = {}
    for conn in list(connections):
        before = conn.ranges
        conn.renegotiate()
        after = conn.ranges
        if before is None or after is None or conn.draining:
            continue  # not negotiated yet (it will be with the new caps), or closing
        pair = (id(before), id(after))
        lost = compared.get(pair)
        if lost is None:
            lost = compared[pair] = withdrawn(before, after)
        if not lost:
            kept += 1
            continue
        drained.append(conn)
        for api_key, (low, high) in lost.items():
            was = lost_here.get(api_key, (low, high))
            lost_here[api_key] = (min(was[0], low), max(was[1], high))
        _start_draining(conn, lost, FEATURE_LEVELS)
    if drained:
        gateway.metrics.connections_renegotiated.labels(FEATURE_LEVELS).inc(len(drained))
        close_when_answered(drained, gateway.config.drain_timeout_s)
        log.info(
            "features.connections_draining",
            reason=FEATURE_LEVELS,
            drained=len(drained),
            kept_open=kept,
            features=gating_features(gateway.features.catalogue, lost_here),
            withdrawn=describe(lost_here),
        )
    return len(drained)


def drain(
    gateway: GatewayServices, conn: ClientConnection, lost: Mapping[int, VersionRange], reason: str
) -> None:
    """Drain ``conn``, which lost the versions ``lost`` for ``reason`` (counted, logged)."""
    _start_draining(conn, lost, reason)
    gateway.metrics.connections_renegotiated.labels(reason).inc()
    close_when_answered([conn], gateway.config.drain_timeout_s)


def _start_draining(conn: ClientConnection, lost: Mapping[int, VersionRange], reason: str) -> None:
    limited.info(
        "connection.draining",
        reason=reason,
        withdrawn=describe(lost),
        in_flight=conn.in_flight(),
        action="answer what is in flight, then close (the client reconnects)",
        **conn.who(),
    )
    conn.drain()  # closes at once when nothing is in flight


def close_when_answered(draining: list[ClientConnection], deadline_s: float) -> asyncio.TimerHandle:
    """Each of ``draining`` closes itself once nothing of it is in flight (``drained``);
    close the rest after ``deadline_s`` (drain_timeout_s) whatever they wait for (a long
    JoinGroup must not keep a connection that may no longer send open for ever); the
    client re-sends what went unanswered."""

    def close_the_rest() -> None:
        for conn in draining:
            conn.close()  # a no-op for those already closed

    return asyncio.get_running_loop().call_later(deadline_s, close_the_rest)
