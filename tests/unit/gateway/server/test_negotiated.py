"""Connections to one upstream share one negotiation (Gateway.negotiated), made again
when the finalized feature levels change."""

from __future__ import annotations

from gateway.config import load_config
from gateway.features.report import NO_FEATURES, FeatureReport
from gateway.features.znode import Finalized
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


def test_answers_that_differ_only_in_the_epoch_share_one_negotiation() -> None:
    # KRaft's FinalizedFeaturesEpoch is the metadata log's offset: it moves with every
    # topic change, so connections opened minutes apart see other epochs. They must not
    # each get a negotiation of their own (an idle connection's memory), but each is told
    # the epoch its broker reported.
    gw = _gateway()
    address = gw.config.upstream
    supported = {"metadata.version": (7, 33)}
    early = FeatureReport(supported, {"metadata.version": 33}, 100)
    later = FeatureReport(supported, {"metadata.version": 33}, 130)
    first = gw.negotiated(address, gateway_supported(), early)
    assert gw.negotiated(address, gateway_supported(), later) is first
    assert gw.feature_report(early).epoch == 100
    assert gw.feature_report(later).epoch == 130
    assert gw.feature_report(later) is gw.feature_report(later)
    # A new level is another shape: negotiated again.
    upgraded = FeatureReport(supported, {"metadata.version": 33, "group.version": 1}, 131)
    assert gw.negotiated(address, gateway_supported(), upgraded) is not first


def test_caps_follow_the_merge_for_a_broker_that_lists_no_features_but_has_an_epoch() -> None:
    # Kafka 3.9 in ZooKeeper mode reports an epoch and no features: group.version is
    # level 0 there, so a level the gateways finalized must not open its heartbeat (the
    # broker would refuse it), as the merged answer says (enforced_levels).
    cfg = load_config(
        None,
        {"upstream": "127.0.0.1:9092", "listen": "127.0.0.1:0", "zookeeper": "127.0.0.1:1"},
    )
    gate = Gateway(cfg).features
    gate._apply(Finalized({"group.version": 1}, 3))
    assert CONSUMER_GROUP_HEARTBEAT not in gate.caps_for(NO_FEATURES)  # Tansu: own levels
    assert gate.caps_for(FeatureReport(epoch=0))[CONSUMER_GROUP_HEARTBEAT] < 0


def test_what_the_gateway_does_not_decode_passes_at_the_upstreams_versions() -> None:
    # Kafka 3.9's old minimums, a version newer than any spec the gateway read, and a key
    # no Kafka release has: each is advertised and forwarded as the upstream offers it.
    # A rewritten API above what the codec handles is capped (Fetch, rewritten from v16,
    # and Metadata: v99 -> the codec's max).
    gw = _gateway()
    upstream = {0: (0, 11), 1: (0, 99), 8: (0, 99), METADATA: (0, 99), 1000: (0, 1)}
    got = gw.negotiated(gw.config.upstream, upstream)
    for key in (0, 8, 1000):
        assert got.ranges[key] == got.passthrough[key] == upstream[key]
    for key in (1, METADATA):
        assert got.ranges[key] == (0, gw.own_range(key)[1]) != upstream[key]
    assert gw.own_range(1000) == (0, 0x7FFF)  # what passes through: any version


def test_kafka_4s_produce_v0_to_2_are_advertised_as_the_broker_does_and_refused_here() -> None:
    # A 4.x broker (Fetch from v4) lists Produce from v0 (KAFKA-18659) but closes the
    # connection on v0-2 (KIP-896): clients are told what the broker says, and the gateway
    # refuses v0-2 itself, so the refusal is counted and attributed. A 3.x broker takes them.
    gw = _gateway()
    kafka_4 = gw.negotiated(gw.config.upstream, {0: (0, 13), 1: (4, 18)})
    assert kafka_4.ranges[0] == (0, 13) and kafka_4.passthrough[0] == (3, 13)
    kafka_3 = gw.negotiated(gw.config.upstream, {0: (0, 11), 1: (0, 17)})
    assert kafka_3.ranges[0] == kafka_3.passthrough[0] == (0, 11)
