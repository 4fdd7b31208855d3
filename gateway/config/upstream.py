"""The upstream: the broker behind the gateway, and what the gateway says on its behalf.

The top level and [broker_software] of the TOML file.
"""

# setting() is a dataclasses.field with metadata; ruff only knows field() itself as one.
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..environment import CACHE_ENV, HOME_ENV, default_cache_dir, default_embedded_home
from ._declare import HostPort, Seconds, at_least, between, positive, setting

EmbeddedBroker = Literal["tansu", "kafka"]
UnknownApiKeys = Literal["close", "forward"]

# Tags 0-3 are ApiVersions' own; below 0 or above a varint int32 is not a tag.
_tag = between(4, 2**31 - 1)


@dataclass(frozen=True)
class Upstream:
    """The upstream broker."""

    __slots__ = ()

    upstream: HostPort | None = setting(
        None,
        flag="--upstream",
        default_means="start a local ZooKeeper and broker (the embedded default)",
        example="127.0.0.1:9093",
        why="the broker (sidecar) or any bootstrap broker (cluster)",
    )
    embedded_broker: EmbeddedBroker = setting(
        "tansu",
        flag="--embedded-broker",
        why='the broker the embedded default starts: "tansu" (light, starts at once) or '
        '"kafka" (Apache Kafka 4.x, KRaft, its jars fetched with Maven on first use)',
    )
    embedded_home: str | None = setting(
        factory=default_embedded_home,
        env=HOME_ENV,
        default_means=f"${HOME_ENV}, else a temporary directory removed on exit",
        example="/var/lib/kafka-gateway",
        why="without upstream: where the local ZooKeeper and broker keep their logs and "
        "data, kept after they stop",
    )
    cache_dir: str = setting(
        factory=default_cache_dir,
        env=CACHE_ENV,
        default_means=f"${CACHE_ENV}/kafka-gateway, else ~/.cache/kafka-gateway (the XDG spec)",
        example="/var/cache/kafka-gateway",
        why="where downloads the gateway keeps between runs live (Apache Kafka's jars, once "
        "per version)",
    )
    upstream_connect_timeout_s: Seconds = setting(
        10.0, check=positive, why="how long to wait for a broker connection"
    )
    upstream_api_versions_check_ms: int = setting(
        10000,
        check=at_least(0),
        why="ask a live connection's upstream ApiVersions again this often, and drain the "
        "connections that lost a version when a broker's answer changed (e.g. "
        "kafka-features.sh downgraded a feature on the brokers); 0: never",
    )
    unknown_api_keys: UnknownApiKeys = setting(
        "close",
        flag="--unknown-api-keys",
        why='a request with an API key the gateway does not know: "close" the connection '
        '(as Kafka does) or "forward" it untouched (vendor keys, e.g. Confluent Cloud\'s)',
    )
    broker_software_name: str | None = setting(
        None,
        table="broker_software",
        name="name",
        default_means="fingerprinted from the upstream's ApiVersions against Apache "
        "Kafka's release tables",
        example="apache-kafka",
        why="KIP-885: the broker software reported to clients",
    )
    broker_software_version: str | None = setting(
        None,
        table="broker_software",
        name="version",
        default_means="fingerprinted, as the name",
        example="4.0.0",
        why="KIP-885: its version, set with broker_software_name",
    )
    broker_software_name_tag: int = setting(
        10000,
        table="broker_software",
        name="name_tag",
        check=_tag,
        why="the tagged-field number of BrokerSoftwareName in ApiVersions v3+ and "
        "DescribeCluster; far above Kafka's own tags (0-3) so they never collide",
    )
    broker_software_version_tag: int = setting(
        10001,
        table="broker_software",
        name="version_tag",
        check=_tag,
        why="the tagged-field number of BrokerSoftwareVersion, likewise",
    )
    synthesize_describe_cluster: bool = setting(
        False, why="KIP-700: answer DescribeCluster from Metadata even when the upstream has it"
    )
