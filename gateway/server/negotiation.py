"""What clients of each upstream may use: versions negotiated, features merged, the
broker's software named.

A connection learns its upstream's ApiVersions (and features) and asks the gateway what
follows from them: the ranges clients are told, what passes through untouched, what the
compiled lane may take. Every connection to one upstream gets the same answer, so it is
made once and shared (``Negotiated``). ``Gateway`` takes this role from ``Negotiation``;
it reads the gateway's config, feature gate, router and metrics.
"""

from __future__ import annotations

from .. import __version__
from ..config import Config, HostPort
from ..features.report import NO_FEATURES, FeatureReport, merge_reports
from ..interceptors import dispatch
from ..observability.logging import get_logger
from ..observability.metrics import Metrics
from ..protocol import DESCRIBE_CLUSTER, PlainTable, api_name, protocol_data
from ..versions import (
    PASS_THROUGH,
    BrokerSoftware,
    VersionRange,
    fingerprint,
    negotiate,
    refused_below,
)
from .features import FeatureGate
from .routing import ClusterRouter, SidecarRouter
from .services import Negotiated

log = get_logger("gateway.server")

# Negotiations kept for sharing (Gateway.negotiated): one per upstream and ApiVersions
# answer, so a cluster mode gateway in front of a large cluster mid-upgrade fits; past
# this they are forgotten and made again.
NEGOTIATED_KEPT = 256


class Negotiation:
    """The negotiation role of ``Gateway`` (``GatewayServices.negotiated`` and the
    version and software questions of ``GatewayView``)."""

    # Of the gateway that takes this role.
    config: Config
    metrics: Metrics
    features: FeatureGate
    router: SidecarRouter | ClusterRouter
    gateway_id: str

    def _init_negotiation(self) -> None:
        # The APIs the gateway decodes, limited to what its codec handles; every other
        # API passes through at every version the upstream offers.
        self._own_ranges = dispatch.codec_limits()
        for key, (_, high) in self._own_ranges.items():
            self.metrics.api_version_limit.labels(str(key), api_name(key)).set(high)
        log.info(
            "protocol.limits",
            kafka=protocol_data()["kafka"],
            decoded={
                api_name(key): f"{low}-{high}" for key, (low, high) in self._own_ranges.items()
            },
            passthrough="every other API, at every version its upstream offers",
        )
        # Keyed by upstream, its ranges and the shape of its features (not their epoch).
        self._negotiated: dict[tuple[object, ...], Negotiated] = {}
        self._feature_reports: dict[tuple[object, ...], FeatureReport] = {}
        self._software: dict[HostPort, BrokerSoftware] = {}

    def _forget_negotiated(self) -> None:
        """The feature levels changed: every shared negotiation is made again."""
        self._negotiated.clear()
        self._feature_reports.clear()

    def synthesizes_describe_cluster(self, upstream: dict[int, VersionRange]) -> bool:
        """KIP-700 for any backend: answer DescribeCluster from Metadata when needed."""
        return self.config.synthesize_describe_cluster or DESCRIBE_CLUSTER not in upstream

    def negotiated(
        self,
        address: HostPort,
        upstream: dict[int, VersionRange],
        upstream_features: FeatureReport = NO_FEATURES,
    ) -> Negotiated:
        """The ranges (and features) of a connection to ``address`` that advertised
        ``upstream`` and reported ``upstream_features``.

        Every connection to one upstream gets the same answer, so it is made once and
        shared: the dicts of up to ~90 keys each were most of an idle connection's
        memory (about 14 kB of its 18 kB of Python objects) when each made its own.
        Forgotten when the feature caps change, and kept for a few upstreams only.
        """
        key = (address, tuple(upstream.items()), upstream_features.shape())
        found = self._negotiated.get(key)
        if found is not None:
            # The feature gate follows the latest answer of each upstream, as when every
            # connection negotiated for itself (a broker rolled back answers as before).
            self.features.set_available(str(address), found.available, upstream_features)
            return found
        available = negotiate(self._own_ranges, upstream)
        ranges = self.advertised_ranges(address, upstream, available, upstream_features)
        passthrough = dict(ranges)
        for api_key, lowest in refused_below(upstream).items():
            if api_key in passthrough:  # advertised as the broker does, refused here
                passthrough[api_key] = (max(lowest, passthrough[api_key][0]), ranges[api_key][1])
        for api_key in dispatch.held_back(self, upstream):
            passthrough.pop(api_key, None)
        caps = self.features.caps_for(upstream_features)
        for api_key, (low, high) in ranges.items():
            if caps.get(api_key, high) < low:
                passthrough.pop(api_key, None)  # advertised, refused until finalized
        if len(self._negotiated) >= NEGOTIATED_KEPT:
            self._negotiated.clear()
        lane = PlainTable(
            passthrough,
            dispatch.REWRITTEN_FROM,
            dispatch.lane_walks(passthrough),
            dispatch.lane_heads(passthrough),
            dispatch.LAST_HEADS,
            self.router,
        )
        found = self._negotiated[key] = Negotiated(upstream, available, ranges, passthrough, lane)
        return found

    def feature_report(self, upstream_features: FeatureReport) -> FeatureReport:
        """What clients of an upstream that reported ``upstream_features`` are told of
        features: the gateways' levels merged with the broker's (gateway.features.report).
        Kept per answer, epoch included, for a few answers; forgotten with the levels."""
        key = upstream_features.key()
        found = self._feature_reports.get(key)
        if found is None:
            if len(self._feature_reports) >= NEGOTIATED_KEPT:
                self._feature_reports.clear()
            found = self._feature_reports[key] = merge_reports(
                self.features.report(),
                upstream_features,
                self.features.catalogue,
                gating=self.features.enabled,
            )
        return found

    def advertised_ranges(
        self,
        address: HostPort,
        upstream: dict[int, VersionRange],
        available: dict[int, VersionRange] | None = None,
        upstream_features: FeatureReport = NO_FEATURES,
    ) -> dict[int, VersionRange]:
        """What clients of this upstream may use: own ∩ upstream ∩ feature caps
        (+ what the gateway answers itself).

        ``available``: own ∩ upstream, when the caller has it already.
        """
        if address not in self._software:
            software = fingerprint(upstream)
            self._software[address] = software
            log.info(
                "upstream.fingerprint",
                upstream=str(address),
                name=software.name,
                version=software.version,
                api_keys=len(upstream),
            )
            self._set_info(address)
        if available is None:
            available = negotiate(self._own_ranges, upstream)
        self.features.set_available(str(address), available, upstream_features)
        caps = self.features.caps_for(upstream_features)
        ranges = negotiate(self._own_ranges, upstream, caps)
        for key, whole in available.items():
            # An API a level gates whole (ConsumerGroupHeartbeat, the share-group APIs)
            # stays advertised and is answered UNSUPPORTED_VERSION until the level is
            # finalized, as Kafka 4.x does: clients then report "the cluster does not
            # support" at once (librdkafka's KIP-848 consumer only retried in silence
            # when the key was missing). Versions a level gates stay withheld.
            if key not in ranges and caps.get(key, whole[1]) < whole[0]:
                ranges[key] = whole
        for key in dispatch.served_for_upstream(self, upstream):
            # The gateway answers these itself (UpdateFeatures: the finalized levels live
            # in the gateways' ZooKeeper), so the upstream does not limit them; the
            # feature caps still do.
            low, high = self._own_ranges[key]
            high = min(high, caps.get(key, high))
            if low <= high:
                ranges[key] = (low, high)
        return ranges

    def _set_info(self, address: HostPort) -> None:
        shown = self.broker_software(address)
        self.metrics.set_info(
            gateway_id=self.gateway_id,
            gateway_version=__version__,
            broker_software_name=shown.name,
            broker_software_version=shown.version,
            upstream=str(address),
            # Which Kafka its protocol tables know (featurectl plan --release: a gateway
            # whose data predates the release it is asked about is named).
            protocol_kafka=str(protocol_data().get("kafka", "unknown")),
        )

    def own_range(self, api_key: int) -> VersionRange | None:
        """The versions of ``api_key`` the gateway can carry: its codec's for an API it
        decodes, any for one that passes through."""
        return self._own_ranges.get(api_key, PASS_THROUGH)

    def broker_software(self, address: HostPort) -> BrokerSoftware:
        """KIP-885 values for an upstream: configured, else its fingerprint."""
        cfg = self.config
        if cfg.broker_software_name is not None and cfg.broker_software_version is not None:
            return BrokerSoftware(cfg.broker_software_name, cfg.broker_software_version)
        return self._software.get(address, BrokerSoftware("unknown", "unknown"))

    def broker_software_of(self, node_id: int) -> BrokerSoftware | None:
        """KIP-885 values for a broker by node id; None when this gateway cannot know
        (a sidecar peer's broker, or a broker no connection has reached yet)."""
        if isinstance(self.router, ClusterRouter):
            try:
                address: HostPort | None = self.router.upstream_for(node_id)
            except KeyError:
                address = None
        elif node_id in self.config.peers:
            address = None
        else:
            address = self.config.upstream
        if address is None:
            return None
        if self.config.broker_software_name is None and address not in self._software:
            return None
        return self.broker_software(address)
