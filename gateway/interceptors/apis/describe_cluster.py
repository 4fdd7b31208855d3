"""DescribeCluster: the brokers array rewritten to gateway addresses and KIP-885 software
tags added, per broker and for the answering broker (``on_response``).

For an upstream without DescribeCluster (or when configured to), the gateway answers it
itself (KIP-700 for any backend): from a Metadata request it sends upstream on its own
behalf, whatever versions the upstream offers.

The bytes are ``gateway.interceptors.describe_cluster``'s and ``upstream``'s.
"""

from __future__ import annotations

from ...protocol import (
    DESCRIBE_CLUSTER,
    METADATA,
    InFlightRequest,
    RequestFrame,
    api_spec,
    response_body_offset,
)
from ...versions import VersionRange
from .. import upstream as internal
from ..api_versions import add_broker_software
from ..context import Exchange, GatewayView
from ..describe_cluster import add_software_per_broker
from ..filter import Answer, AskUpstream, Close, Filter, Forward


def synthesize_describe_cluster(
    ctx: Exchange, request: RequestFrame, body: memoryview
) -> AskUpstream | Close:
    """KIP-700 for any backend: DescribeCluster answered from a Metadata request the
    gateway sends upstream on its own behalf."""
    header = request.header
    metadata_max = ctx.upstream_ranges.get(METADATA, (0, -1))[1]
    version = min(metadata_max, 12)
    if version < 1:
        return Close(
            "malformed_frame",
            "upstream offers no Metadata version to build DescribeCluster",
            side="upstream",
        )
    try:
        asked = internal.parse_describe_cluster_request(header.api_version, bytes(body))
    except ValueError as exc:
        # Kafka closes a connection whose request it cannot parse (found by fuzzing:
        # the error used to escape from the broker's answer to our Metadata request).
        return Close("malformed_request", str(exc))

    def from_metadata(payload: memoryview) -> Answer:
        spec = api_spec(METADATA)
        assert spec is not None
        offset = response_body_offset(payload, spec.response_header_version(version))
        answer = internal.describe_cluster_from_metadata(
            header, asked, version, payload[offset:], ctx.gateway.router
        )
        return Answer(_with_software(ctx, header.api_version, answer))

    return AskUpstream(
        METADATA, lambda cid: (version, internal.metadata_request(cid, version)), from_metadata
    )


def _with_software(ctx: Exchange, version: int, payload: bytes) -> bytes:
    """KIP-885 tags for a DescribeCluster response payload the gateway built."""
    spec = api_spec(DESCRIBE_CLUSTER)
    assert spec is not None
    offset = response_body_offset(payload, spec.response_header_version(version))
    return payload[:offset] + software(ctx, version, payload[offset:])


def add_software(ctx: Exchange, entry: InFlightRequest, body: memoryview) -> Forward:
    """The broker's answer, its brokers already at gateway addresses, with KIP-885 tags."""
    return Forward(software(ctx, entry.api_version, bytes(body)))


def software(ctx: Exchange, version: int, body: bytes) -> bytes:
    """BrokerSoftwareName/Version per broker entry and for the answering broker."""
    gw = ctx.gateway
    body = add_software_per_broker(version, body, gw.broker_software_of, gw.software_tags)
    return add_broker_software(
        DESCRIBE_CLUSTER,
        version,
        body,
        gw.broker_software(ctx.upstream_address),
        gw.software_tags,
    )


def synthesized(gw: GatewayView, upstream: dict[int, VersionRange]) -> bool:
    return gw.synthesizes_describe_cluster(upstream)


FILTER = Filter(
    DESCRIBE_CLUSTER,
    on_request=synthesize_describe_cluster,
    requests_when=synthesized,
    replaces_upstream=True,
    rewritten_from=0,
    on_response=add_software,
)
