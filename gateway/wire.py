"""The Kafka wire, as tools outside the gateway may use it: featurectl, the test harness,
the bench.

What the gateway itself speaks, under one public name, so a tool encodes and reads
messages exactly as the gateway does and carries no copy of its own. What is behind it
(``gateway.protocol``'s public names, ``gateway.kafka_client``) is the gateway's to
rearrange; this surface stays.

Messages (kio entities, generated from Kafka's message JSON files):
    ``encode_request``, ``decode_request``, ``encode_response``, ``decode_response``,
    ``encode`` / ``decode`` (any entity, headers included), ``decode_with_unknown_tags``
    and ``strip_unknown_tags`` (kio refuses top-level tags it does not know, KIP-482
    says skip them), ``decode_answer`` (decode with such tags dropped).
APIs: ``api_spec`` (name, versions, flexibility, header versions), ``api_name``,
    ``api_range``, ``known_api_keys``, ``has_schema``, the key constants.
Framing: ``frame``, ``request_header``, ``request_frame``, ``parse_request_header``
    (``RequestHeader``), ``response_body``, ``response_body_offset``.
Primitives: ``read_uvarint`` / ``write_uvarint``, ``skip_tagged_fields``,
    ``read_tagged_fields`` / ``write_tagged_fields``, ``INT16`` / ``INT32``; they raise
    ``Incomplete`` when the bytes end early and ``Malformed`` (a ValueError) when they
    break the format.
Connections: ``KafkaConnection`` (blocking, for tools), ``AsyncKafkaConnection``
    (asyncio), ``Requests`` (their framing without I/O), ``WrongAnswer``, and the
    requests the gateway sends for itself: ``api_versions_request``,
    ``metadata_request``, ``metadata_version``, ``probe_api_versions``,
    ``probe_metadata``.
"""

from __future__ import annotations

import io
from typing import Any, TypeVar

from kio.serial import entity_reader, entity_writer

from .kafka_client import (
    METADATA_MAX,
    AsyncKafkaConnection,
    KafkaConnection,
    Requests,
    WrongAnswer,
    api_versions_request,
    decode_answer,
    metadata_request,
    metadata_version,
    probe_api_versions,
    probe_metadata,
    request_frame,
    request_header,
    response_body,
)
from .protocol import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    FETCH,
    FIND_COORDINATOR,
    INT16,
    INT32,
    METADATA,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    UPDATE_FEATURES,
    ApiSpec,
    Incomplete,
    Malformed,
    RequestHeader,
    api_name,
    api_range,
    api_spec,
    decode_request,
    decode_response,
    decode_with_unknown_tags,
    encode_request,
    encode_response,
    frame,
    has_schema,
    known_api_keys,
    parse_request_header,
    read_tagged_fields,
    read_uvarint,
    response_body_offset,
    skip_tagged_fields,
    strip_unknown_tags,
    write_tagged_fields,
    write_uvarint,
)

E = TypeVar("E")


def encode(entity: Any) -> bytes:
    """Any kio entity as bytes: a request or response body, or a header."""
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def decode(entity_type: type[E], data: bytes, offset: int = 0, *, exact: bool = True) -> E:
    """A kio entity of ``entity_type`` read from ``data`` at ``offset``; with ``exact``,
    bytes left after it are a ValueError.

    kio raises KeyError on a tagged field it does not know (KIP-482 says skip it): a
    response that may carry one (tags a gateway adds) goes through
    ``decode_with_unknown_tags`` instead.
    """
    value, size = entity_reader(entity_type)(data, offset)
    if exact and offset + size != len(data):
        raise ValueError(
            f"{entity_type.__name__}: {len(data) - offset - size} trailing bytes after "
            f"{size} parsed"
        )
    return value


__all__ = [
    "API_VERSIONS",
    "DESCRIBE_CLUSTER",
    "FETCH",
    "FIND_COORDINATOR",
    "INT16",
    "INT32",
    "METADATA",
    "METADATA_MAX",
    "PRODUCE",
    "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE",
    "UPDATE_FEATURES",
    "ApiSpec",
    "AsyncKafkaConnection",
    "Incomplete",
    "KafkaConnection",
    "Malformed",
    "RequestHeader",
    "Requests",
    "WrongAnswer",
    "api_name",
    "api_range",
    "api_spec",
    "api_versions_request",
    "decode",
    "decode_answer",
    "decode_request",
    "decode_response",
    "decode_with_unknown_tags",
    "encode",
    "encode_request",
    "encode_response",
    "frame",
    "has_schema",
    "known_api_keys",
    "metadata_request",
    "metadata_version",
    "parse_request_header",
    "probe_api_versions",
    "probe_metadata",
    "read_tagged_fields",
    "read_uvarint",
    "request_frame",
    "request_header",
    "response_body",
    "response_body_offset",
    "skip_tagged_fields",
    "strip_unknown_tags",
    "write_tagged_fields",
    "write_uvarint",
]
