"""``featurectl brokers``: what software stands behind each gateway (KIP-885 read-back).

Sends ApiVersions v3 to each address and reads the BrokerSoftwareName/Version tagged
fields a kafka-gateway adds; a plain Kafka broker has none and shows as "-".

With ``--bootstrap-server`` the addresses are the brokers a Metadata answer through that
address lists, as a Kafka client sees them: through a gateway, the gateway listeners it
advertises in place of the brokers.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway import __version__
from gateway.interceptors.api_versions import (
    DEFAULT_SOFTWARE_TAGS,
    SoftwareTags,
    read_broker_software,
)
from gateway.wire import (
    API_VERSIONS,
    api_versions_request,
    encode_request,
    metadata_request,
    metadata_version,
)

from .client_config import ClientConfig
from .kafka import KafkaClient, KafkaClientError


@dataclass(frozen=True)
class BrokerSoftwareRow:
    address: str
    name: str | None
    version: str | None
    error: str | None = None


def api_versions_payload(
    address: str, timeout: float = 5.0, config: ClientConfig | None = None
) -> bytes:
    """One ApiVersions v3 round trip (plaintext unless ``config`` says); the response body."""
    body = encode_request(api_versions_request(3, "featurectl", __version__))
    with KafkaClient(address, config or ClientConfig(), timeout) as client:
        return client.roundtrip(API_VERSIONS, 3, body)


def advertised_brokers(
    bootstrap: str, config: ClientConfig | None = None, timeout: float = 5.0
) -> list[str]:
    """HOST:PORT of every broker a Metadata request (no topics) through ``bootstrap``
    lists, by node id. KafkaClientError when it cannot be asked."""
    with KafkaClient(bootstrap, config or ClientConfig(), timeout) as client:
        described = client.describe()
        client.authenticate()
        version = metadata_version(described.api_ranges)
        if version is None:
            raise KafkaClientError(f"{bootstrap} offers no Metadata version featurectl sends")
        answer = client.request(metadata_request(version))
    brokers = sorted(answer.brokers, key=lambda broker: int(broker.node_id))
    return [_address(broker.host, int(broker.port)) for broker in brokers]


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def describe_brokers(
    addresses: list[str],
    tags: SoftwareTags = DEFAULT_SOFTWARE_TAGS,
    timeout: float = 5.0,
    config: ClientConfig | None = None,
) -> list[BrokerSoftwareRow]:
    rows = []
    for address in addresses:
        try:
            payload = api_versions_payload(address, timeout, config)
        except (KafkaClientError, ValueError) as exc:
            rows.append(BrokerSoftwareRow(address, None, None, str(exc)))
            continue
        found = read_broker_software(payload, tags=tags)
        rows.append(BrokerSoftwareRow(address, *(found or (None, None))))
    return rows
