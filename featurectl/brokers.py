"""``featurectl brokers``: what software stands behind each gateway (KIP-885 read-back).

Sends ApiVersions v3 to each address and reads the BrokerSoftwareName/Version tagged
fields a kafka-gateway adds; a plain Kafka broker has none and shows as "-".
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from gateway import __version__
from gateway.interceptors._codec import encode_request
from gateway.interceptors.api_versions import (
    DEFAULT_SOFTWARE_TAGS,
    SoftwareTags,
    read_broker_software,
)
from gateway.protocol import API_VERSIONS

from .kafka import ClientConfig, KafkaClient, KafkaClientError


@dataclass(frozen=True)
class BrokerSoftwareRow:
    address: str
    name: str | None
    version: str | None
    error: str | None = None


def api_versions_payload(address: str, timeout: float = 5.0) -> bytes:
    """One ApiVersions v3 round trip over a plaintext connection; the response body."""
    body = encode_request(
        ApiVersionsRequest(client_software_name="featurectl", client_software_version=__version__)
    )
    with KafkaClient(address, ClientConfig(), timeout) as client:
        return client.roundtrip(API_VERSIONS, 3, body)


def describe_brokers(
    addresses: list[str], tags: SoftwareTags = DEFAULT_SOFTWARE_TAGS, timeout: float = 5.0
) -> list[BrokerSoftwareRow]:
    rows = []
    for address in addresses:
        try:
            payload = api_versions_payload(address, timeout)
        except (KafkaClientError, ValueError) as exc:
            rows.append(BrokerSoftwareRow(address, None, None, str(exc)))
            continue
        found = read_broker_software(payload, tags=tags)
        rows.append(BrokerSoftwareRow(address, *(found or (None, None))))
    return rows
