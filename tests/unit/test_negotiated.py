"""Connections to one upstream share one negotiation (Gateway.negotiated), made again
when the finalized feature levels change."""

from __future__ import annotations

from gateway.config import load_config
from gateway.protocol import API_VERSIONS, METADATA
from gateway.server.app import Gateway
from gateway.versions import gateway_supported


def _gateway() -> Gateway:
    cfg = load_config(None, {"upstream": "127.0.0.1:9092", "listen": "127.0.0.1:0"})
    return Gateway(cfg)


def test_equal_answers_from_one_upstream_share_one_negotiation() -> None:
    gw = _gateway()
    address = gw.config.upstream
    first = gw.negotiated(address, gateway_supported())
    second = gw.negotiated(address, gateway_supported())  # another connection's own parse
    assert second is first
    # The gateway answers ApiVersions itself: never in the pass-through table.
    assert API_VERSIONS in first.ranges and API_VERSIONS not in first.passthrough
    assert first.passthrough[METADATA] == first.ranges[METADATA]


def test_another_answer_or_new_levels_make_a_new_negotiation() -> None:
    gw = _gateway()
    address = gw.config.upstream
    first = gw.negotiated(address, gateway_supported())
    older = {**gateway_supported(), METADATA: (0, 9)}
    other = gw.negotiated(address, older)
    assert other is not first and other.ranges[METADATA] == (0, 9)
    gw._features_changed()  # what a finalize in ZooKeeper calls
    assert gw.negotiated(address, gateway_supported()) is not first
