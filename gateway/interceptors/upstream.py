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

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from .. import __version__
from ..protocol import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    METADATA,
    RequestHeader,
    api_spec,
    frame,
    response_header,
)
from ..protocol._wire import INT16, INT32
from ._codec import decode_request, decode_response, encode_request, encode_response
from ._tagged import strip_unknown_tags
from .endpoints import AddressBook

GATEWAY_SOFTWARE_NAME = "kafka-gateway"
GATEWAY_CLIENT_ID = "kafka-gateway"

# ClusterAuthorizedOperations when the client did not ask for them (Kafka's default).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def _request_frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    spec = api_spec(api_key)
    assert spec is not None
    client_id = GATEWAY_CLIENT_ID.encode()
    header = INT16.pack(api_key) + INT16.pack(version) + INT32.pack(correlation_id)
    header += INT16.pack(len(client_id)) + client_id
    if spec.request_header_version(version) == 2:
        header += b"\x00"  # empty tagged-field section of header v2
    return frame(header + body)


#: The versions of ApiVersions the gateway asks an upstream, newest first, each tried when
#: the broker refused the one before: v4 brings every supported feature (a v3 answer
#: leaves out those whose min level is 0, KIP-1022), v3 is what brokers before 3.9 know,
#: v0 what every broker answers.
UPSTREAM_API_VERSIONS = (4, 3, 0)


def api_versions_request(correlation_id: int, version: int = 4) -> tuple[int, bytes]:
    """(version, frame) of the ApiVersions request the gateway sends for itself."""
    body = b""
    if version >= 3:
        schema: Any = load_request_schema(API_VERSIONS, version)
        body = encode_request(
            schema(client_software_name=GATEWAY_SOFTWARE_NAME, client_software_version=__version__)
        )
    return version, _request_frame(API_VERSIONS, version, correlation_id, body)


def metadata_request(correlation_id: int, version: int) -> bytes:
    """A Metadata request for no topics: only brokers, cluster id and controller."""
    schema: Any = load_request_schema(METADATA, version)
    fields = {f for f in schema.__dataclass_fields__}
    kwargs: dict[str, Any] = {"topics": () if version == 0 else None}
    if "allow_auto_topic_creation" in fields:
        kwargs["allow_auto_topic_creation"] = False
    if "include_cluster_authorized_operations" in fields:
        kwargs["include_cluster_authorized_operations"] = False
    if "include_topic_authorized_operations" in fields:
        kwargs["include_topic_authorized_operations"] = False
    return _request_frame(METADATA, version, correlation_id, encode_request(schema(**kwargs)))


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
    schema: Any = importlib.import_module(
        load_response_schema(DESCRIBE_CLUSTER, version).__module__
    )
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
