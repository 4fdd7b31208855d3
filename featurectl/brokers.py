"""``featurectl brokers``: what software stands behind each gateway (KIP-885 read-back).

Sends ApiVersions v3 to each address and reads the BrokerSoftwareName/Version tagged
fields a kafka-gateway adds; a plain Kafka broker has none and shows as "-".

With ``--bootstrap-server`` the addresses are the brokers a Metadata answer through that
address lists, as a Kafka client sees them: through a gateway, the gateway listeners it
advertises in place of the brokers.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from gateway import __version__
from gateway.interceptors._codec import encode_request
from gateway.interceptors.api_versions import (
    DEFAULT_SOFTWARE_TAGS,
    SoftwareTags,
    read_broker_software,
)
from gateway.protocol import API_VERSIONS, METADATA

from .kafka import ClientConfig, KafkaClient, KafkaClientError


@dataclass(frozen=True)
class BrokerSoftwareRow:
    address: str
    name: str | None
    version: str | None
    error: str | None = None


# The newest Metadata version featurectl sends; older ones where the peer offers no more.
# v0 is never sent: there an empty topic list means every topic, not none.
_METADATA_MAX = 12


def api_versions_payload(
    address: str, timeout: float = 5.0, config: ClientConfig | None = None
) -> bytes:
    """One ApiVersions v3 round trip (plaintext unless ``config`` says); the response body."""
    body = encode_request(
        ApiVersionsRequest(client_software_name="featurectl", client_software_version=__version__)
    )
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
        low, high = described.api_ranges.get(METADATA, (0, -1))
        version = min(high, _METADATA_MAX)
        if version < max(low, 1):
            raise KafkaClientError(f"{bootstrap} offers no Metadata version featurectl sends")
        request_type = importlib.import_module(
            f"kio.schema.metadata.v{version}.request"
        ).MetadataRequest
        # The fields differ by version; these are the ones that keep the answer small.
        wanted = {
            "topics": (),
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        fields = {f.name for f in dataclasses.fields(request_type)}
        answer = client.request(request_type(**{k: v for k, v in wanted.items() if k in fields}))
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
