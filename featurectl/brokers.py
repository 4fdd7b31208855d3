"""``featurectl brokers``: what software stands behind each gateway (KIP-885 read-back).

Sends ApiVersions v3 to each address and reads the BrokerSoftwareName/Version tagged
fields a kafka-gateway adds; a plain Kafka broker has none and shows as "-".
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from gateway import __version__
from gateway.interceptors._codec import encode_request
from gateway.interceptors.api_versions import (
    DEFAULT_SOFTWARE_TAGS,
    SoftwareTags,
    read_broker_software,
)
from gateway.protocol import frame

_INT32 = struct.Struct(">i")


@dataclass(frozen=True)
class BrokerSoftwareRow:
    address: str
    name: str | None
    version: str | None
    error: str | None = None


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed before the response was complete")
        chunks += chunk
    return bytes(chunks)


def api_versions_payload(address: str, timeout: float = 5.0) -> bytes:
    """One ApiVersions v3 round trip; the response payload (header v0 + body)."""
    host, _, port = address.rpartition(":")
    body = encode_request(
        ApiVersionsRequest(client_software_name="featurectl", client_software_version=__version__)
    )
    client_id = b"featurectl"
    header = struct.pack(">hhih", 18, 3, 1, len(client_id)) + client_id + b"\x00"
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
        sock.sendall(frame(header + body))
        (size,) = _INT32.unpack(_recv_exact(sock, 4))
        return _recv_exact(sock, size)


def describe_brokers(
    addresses: list[str], tags: SoftwareTags = DEFAULT_SOFTWARE_TAGS, timeout: float = 5.0
) -> list[BrokerSoftwareRow]:
    rows = []
    for address in addresses:
        try:
            payload = api_versions_payload(address, timeout)
        except (OSError, ValueError) as exc:
            rows.append(BrokerSoftwareRow(address, None, None, str(exc)))
            continue
        found = read_broker_software(payload, tags=tags)
        rows.append(BrokerSoftwareRow(address, *(found or (None, None))))
    return rows
