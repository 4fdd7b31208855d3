"""Which live connections a level change reaches (gateway.server.withdrawn): those whose
ranges lost a version are drained, the rest stay open."""

from __future__ import annotations

import asyncio
import tomllib
from types import SimpleNamespace
from typing import Any

from gateway.features.catalogue import parse_catalogue
from gateway.observability.metrics import Metrics
from gateway.server.withdrawn import describe, gating_features, renegotiate_all, withdrawn
from tests.unit._connection import RecordingTransport, connected

PRODUCE, FETCH, HEARTBEAT, UPDATE_FEATURES = 0, 1, 68, 57
CATALOGUE = parse_catalogue(tomllib.loads('[features."test.version"]\nlevels.1 = ["Produce>=10"]'))


def test_a_lowered_top_withdraws_the_versions_above_it() -> None:
    assert withdrawn({PRODUCE: (3, 11), FETCH: (4, 17)}, {PRODUCE: (3, 9), FETCH: (4, 17)}) == {
        PRODUCE: (10, 11)
    }


def test_an_api_no_longer_offered_is_withdrawn_whole() -> None:
    assert withdrawn({HEARTBEAT: (0, 1), FETCH: (4, 17)}, {FETCH: (4, 17)}) == {HEARTBEAT: (0, 1)}


def test_versions_added_or_kept_withdraw_nothing() -> None:
    before = {PRODUCE: (3, 9), FETCH: (4, 17)}
    assert withdrawn(before, before) == {}
    # A raised level: the client does not know of the new versions, nor needs them.
    assert withdrawn(before, {PRODUCE: (3, 11), FETCH: (4, 17), HEARTBEAT: (0, 1)}) == {}


def test_a_raised_bottom_withdraws_the_versions_below_it() -> None:
    assert withdrawn({PRODUCE: (3, 11)}, {PRODUCE: (5, 11)}) == {PRODUCE: (3, 4)}
    assert withdrawn({PRODUCE: (3, 11)}, {PRODUCE: (12, 13)}) == {PRODUCE: (3, 11)}


def test_withdrawn_versions_name_their_api_and_the_feature_that_gates_them() -> None:
    lost = {PRODUCE: (10, 11), HEARTBEAT: (0, 0)}
    assert describe(lost) == {"Produce": "v10-v11", "ConsumerGroupHeartbeat": "v0"}
    assert gating_features(CATALOGUE, lost) == ["test.version>=1"]


class FakeConnection:
    """What renegotiate_all uses of a ClientConnection."""

    def __init__(self, before: dict[int, Any] | None, after: dict[int, Any] | None) -> None:
        self.ranges, self._after = before, after
        self.draining = self.closed = False
        self.in_flight_count = 1

    def renegotiate(self) -> None:
        self.ranges = self._after

    def in_flight(self) -> int:
        return self.in_flight_count

    def drain(self) -> None:
        self.draining = True

    def close(self) -> None:
        self.closed = True

    def who(self) -> dict[str, object]:
        return {"peer": "127.0.0.1:1"}


def _gateway(drain_timeout_s: float = 30.0) -> Any:
    return SimpleNamespace(
        metrics=Metrics(),
        config=SimpleNamespace(drain_timeout_s=drain_timeout_s),
        features=SimpleNamespace(catalogue=CATALOGUE),
    )


def _drained_total(gateway: Any) -> float:
    value = gateway.metrics.registry.get_sample_value(
        "kafka_gateway_connections_renegotiated_total", {"reason": "feature_levels"}
    )
    assert value is not None
    return value


def test_only_connections_that_lost_a_version_are_drained_and_counted() -> None:
    high = {PRODUCE: (3, 11), FETCH: (4, 17)}
    low = {PRODUCE: (3, 9), FETCH: (4, 17)}
    lost = FakeConnection(high, low)
    unaffected = FakeConnection(low, low)  # e.g. another upstream that never had v10+
    grown = FakeConnection(low, high)
    not_negotiated = FakeConnection(None, low)
    shutting_down = FakeConnection(high, low)
    shutting_down.draining = True
    gateway = _gateway()

    async def run() -> int:
        return renegotiate_all(gateway, [lost, unaffected, grown, not_negotiated, shutting_down])

    assert asyncio.run(run()) == 1
    assert lost.draining and lost.ranges == low  # renegotiated, then drained
    assert not unaffected.draining and not grown.draining and not not_negotiated.draining
    assert grown.ranges == high and not_negotiated.ranges == low
    assert _drained_total(gateway) == 1


def test_a_drained_connection_closes_once_answered_even_by_the_gateway_itself() -> None:
    # UpdateFeatures is answered here once the new levels are served: no upstream answer
    # comes to close the connection, the gateway's own answer does.
    conn, client, _ = connected(RecordingTransport)
    entry = conn.inflight.add(UPDATE_FEATURES, 1, 7, to_upstream=False)
    conn.drain()
    assert not conn.closed  # its request is still in flight
    conn.exchange.answer(entry, b"\x00" * 8)
    assert client.written and conn.closed


def test_a_drained_connection_is_closed_after_drain_timeout_s_whatever_is_in_flight() -> None:
    conn = FakeConnection({PRODUCE: (3, 11)}, {PRODUCE: (3, 9)})
    gateway = _gateway(drain_timeout_s=0.1)

    async def run() -> None:
        renegotiate_all(gateway, [conn])
        assert conn.draining and not conn.closed  # a request still in flight
        await asyncio.sleep(0.2)

    asyncio.run(run())
    assert conn.closed


def test_a_change_that_withdraws_nothing_drains_and_counts_nothing() -> None:
    same = {PRODUCE: (3, 11)}
    conns = [FakeConnection(same, same) for _ in range(3)]
    gateway = _gateway()

    async def run() -> int:
        return renegotiate_all(gateway, conns)

    assert asyncio.run(run()) == 0
    assert not any(c.draining for c in conns)
    assert _drained_total(gateway) == 0
