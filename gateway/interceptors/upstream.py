"""Requests the gateway itself sends upstream, and what it makes of their answers.

The gateway speaks to the broker on its own behalf twice: an ApiVersions request when
an upstream connection opens (to learn what the broker supports), and a Metadata
request when it synthesizes DescribeCluster for a broker that lacks it (KIP-700).
Both travel on the client's own upstream connection with negative correlation ids,
which no client uses, and their responses never reach the client.
"""

from __future__ import annotations

import datetime
import importlib
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from .. import __version__
from ..kafka_client import (
    GATEWAY_CLIENT_ID,
    GATEWAY_SOFTWARE_NAME,
    request_frame,
)
from ..kafka_client import api_versions_request as api_versions_request_entity
from ..kafka_client import metadata_request as metadata_request_entity
from ..protocol import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    METADATA,
    RequestHeader,
    api_spec,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    response_header,
    response_schema,
    strip_unknown_tags,
)
from .endpoints import AddressBook

# ClusterAuthorizedOperations when the client did not ask for them (Kafka's default).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def api_versions_request(correlation_id: int, version: int = 4) -> tuple[int, bytes]:
    """(version, frame) of the ApiVersions request the gateway sends for itself."""
    entity = api_versions_request_entity(version, GATEWAY_SOFTWARE_NAME, __version__)
    body = encode_request(entity)
    return version, request_frame(API_VERSIONS, version, correlation_id, body, GATEWAY_CLIENT_ID)


def metadata_request(correlation_id: int, version: int) -> bytes:
    """A Metadata request (v1+) for no topics: only brokers, cluster id and controller."""
    body = encode_request(metadata_request_entity(version))
    return request_frame(METADATA, version, correlation_id, body, GATEWAY_CLIENT_ID)


def parse_describe_cluster_request(version: int, body: bytes | memoryview) -> Any:
    """Decode a DescribeCluster request body; raises ValueError when it does not decode
    (checked before anything is asked upstream: Kafka closes on such a request)."""
    try:
        return decode_request(DESCRIBE_CLUSTER, version, body)
    except Exception as exc:  # kio raises assorted errors on malformed bodies
        raise ValueError(f"DescribeCluster v{version} body does not decode: {exc!r}") from None


def describe_cluster_from_metadata(
    request: RequestHeader,
    asked: Any,
    metadata_version: int,
    metadata_body: bytes | memoryview,
    book: AddressBook,
) -> bytes:
    """A DescribeCluster response payload (header + body) at the client's version,
    built from a Metadata response, with brokers at their gateway addresses. ``asked``
    is the request, from ``parse_describe_cluster_request``."""
    version = request.api_version
    metadata = decode_response(
        METADATA, metadata_version, strip_unknown_tags(METADATA, metadata_version, metadata_body)
    )
    schema: Any = importlib.import_module(response_schema(DESCRIBE_CLUSTER, version).__module__)
    broker_fields = set(schema.DescribeClusterBroker.__dataclass_fields__)
    brokers = []
    for b in metadata.brokers:
        host, port = book.advertise(int(b.node_id), b.host, int(b.port))
        kwargs: dict[str, Any] = {
            "broker_id": b.node_id,
            "host": host,
            "port": i32(port),
            "rack": b.rack,
        }
        if "is_fenced" in broker_fields:
            kwargs["is_fenced"] = False
        brokers.append(schema.DescribeClusterBroker(**kwargs))
    response_fields = set(schema.DescribeClusterResponse.__dataclass_fields__)
    kwargs = {
        "throttle_time": datetime.timedelta(0),
        "error_code": ErrorCode.none,
        "error_message": None,
        "cluster_id": metadata.cluster_id or "",
        "controller_id": getattr(metadata, "controller_id", i32(-1)),
        "brokers": tuple(brokers),
        "cluster_authorized_operations": i32(AUTHORIZED_OPERATIONS_OMITTED),
    }
    if "endpoint_type" in response_fields:
        kwargs["endpoint_type"] = i8(getattr(asked, "endpoint_type", 1))
    body = encode_response(schema.DescribeClusterResponse(**kwargs))
    spec = api_spec(DESCRIBE_CLUSTER)
    assert spec is not None
    return response_header(request.correlation_id, spec.response_header_version(version)) + body
