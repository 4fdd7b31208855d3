"""The next Kafka release, watched live (``upgrade_target_release``): requests its
brokers would refuse, counted by API, version and client software, and the client
identities on /clients that would break.

Like Kafka's own DeprecatedRequestsPerSec (KIP-896) but for the release the cluster is
heading to, and at no cost per request: the traffic counters already count requests
by API version and client (``metrics.TrafficCollector``, folded at scrape time), so
``kafka_gateway_requests_below_target_release_total`` is derived from them when
scraped, one table lookup per series. What a release refuses is
``gateway.versions.accepted_versions`` (its advertised minimums, and Produce v0-2
from 4.0), the same rule ``featurectl plan --release`` judges by.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from ..protocol import api_name
from ..versions import accepted_versions, release_named
from .traffic_metrics import TrafficCollector

BELOW_TARGET = "kafka_gateway_requests_below_target_release"
BELOW_TARGET_LABELS = (
    "release",
    "api_key",
    "api",
    "api_version",
    "client_software_name",
    "client_software_version",
)


class ReleaseWatch(Collector):
    """The declared next release and what it refuses; a collector of the derived counter."""

    def __init__(self, release: str | None, traffic: TrafficCollector | None = None) -> None:
        self.traffic = traffic
        self.release: str | None = None
        # key -> lowest version the release accepts; a key absent from it: none.
        self._minimum: dict[int, int] = {}
        self.set_release(release)

    def set_release(self, release: str | None) -> None:
        """Watch ``release`` (None: nothing). KeyError for a release the tables lack
        (the config check has said so before this is reached)."""
        if release is None:
            self.release, self._minimum = None, {}
            return
        row = release_named(release)
        self.release = row.name
        self._minimum = {key: low for key, (low, _high) in accepted_versions(row).items()}

    def refuses(self, api_key: int, api_version: int) -> bool:
        """Whether the watched release refuses this request (False without one, and for
        the -1/-1 series of unknown keys and absurd versions)."""
        if self.release is None or api_key < 0 or api_version < 0:
            return False
        low = self._minimum.get(api_key)
        return low is None or api_version < low

    def mark(self, identities: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """/clients entries with ``breaks_on``: the release and the API versions the
        identity used that it refuses (absent without a watched release)."""
        if self.release is None:
            return identities
        for entry in identities:
            refused = [
                {"api_key": u["api_key"], "api": u["api"], "api_version": u["api_version"]}
                for u in entry.get("versions_used", ())
                if self.refuses(u["api_key"], u["api_version"])
            ]
            entry["breaks_on"] = {"release": self.release, "versions": refused} if refused else None
        return identities

    def describe(self) -> Iterable[Metric]:
        return [self._family({})]

    def collect(self) -> Iterable[Metric]:
        if self.release is None or self.traffic is None:
            return [self._family({})]
        if self.traffic.refresh is not None:
            # The live connections' counts, folded as the traffic counters fold them
            # (a second fold in one scrape finds nothing new to take).
            self.traffic.refresh()
        totals: dict[tuple[str, str, int, int], int] = {}
        for (_listener, name, version, key, api_version), count in self.traffic.requests.items():
            if self.refuses(key, api_version):
                label = (name, version, key, api_version)
                totals[label] = totals.get(label, 0) + count
        return [self._family(totals)]

    def _family(self, totals: dict[tuple[str, str, int, int], int]) -> Metric:
        family = CounterMetricFamily(
            BELOW_TARGET,
            "Requests the declared next Kafka release (upgrade_target_release) would refuse: "
            "below its minimum version of the API, or an API it lacks",
            labels=BELOW_TARGET_LABELS,
        )
        for (name, version, key, api_version), count in sorted(totals.items()):
            family.add_metric(
                [str(self.release), str(key), api_name(key), str(api_version), name, version],
                count,
            )
        return family


__all__ = ["BELOW_TARGET", "BELOW_TARGET_LABELS", "ReleaseWatch"]
