"""Connections to one upstream share one negotiation (Gateway.negotiated), made again
when the finalized feature levels change."""

from __future__ import annotations

from gateway.config import load_config
from gateway.protocol import API_VERSIONS, METADATA
from gateway.server.app import Gateway
from gateway.versions import gateway_supported

CONSUMER_GROUP_HEARTBEAT = 68  # what group.version=1 needs (KIP-848)


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


def test_the_feature_gate_follows_the_latest_answer_even_when_shared() -> None:
    # A broker rolled back to an earlier version answers as before: its connections get
    # the negotiation kept from then, and the gateway's support must follow it again.
    gw = _gateway()
    address = gw.config.upstream
    newer = gateway_supported()
    older = {key: r for key, r in newer.items() if key != CONSUMER_GROUP_HEARTBEAT}
    gw.negotiated(address, newer)
    served = gw.features.supported["group.version"][1]
    assert served >= 1
    gw.negotiated(address, older)
    assert gw.features.supported["group.version"][1] == 0
    gw.negotiated(address, newer)  # kept from the first time
    assert gw.features.supported["group.version"][1] == served
