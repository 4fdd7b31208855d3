"""Request and response headers, and the one body field the core must read (Produce acks)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ._apis import CONTROLLED_SHUTDOWN, api_spec
from ._hot import IMPOSSIBLE, NOT_HERE, produce_acks_at, read_int16
from ._walk import skip_tagged_fields
from ._wire import (
    INT32,
    Incomplete,
    Malformed,
    read_classic_string,
)

_KEY_VERSION_CORRELATION = struct.Struct(">hhi")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # Offset of the request body within the frame payload (after the header).
    body_offset: int


def parse_request_header(payload: bytes | bytearray | memoryview) -> RequestHeader:
    """Parse a request header v0/v1/v2 from a frame payload (no length prefix).

    The header version follows from the api key and version; keys the gateway does not
    know are read as header v1, which is what every client sends for them.
    """
    if len(payload) < 8:
        raise Malformed(f"request header needs 8 bytes, frame has {len(payload)}")
    key, version, correlation_id = _KEY_VERSION_CORRELATION.unpack_from(payload, 0)
    spec = api_spec(key)
    if spec is not None:
        header_version = spec.request_header_version(version)
    else:
        # kio has no ControlledShutdown schemas (Kafka 4 removed the API), so the one
        # header v0 case must be recognised without a spec.
        header_version = 0 if key == CONTROLLED_SHUTDOWN and version == 0 else 1
    if header_version == 0:
        return RequestHeader(key, version, correlation_id, None, 8)
    try:
        client_id, pos = read_classic_string(payload, 8)
        if header_version == 2:
            pos = skip_tagged_fields(payload, pos)
    except (Incomplete, Malformed):
        if spec is None:
            # An unknown key's header version is a guess: what is certain ends with the
            # correlation id, and that is all the gateway needs to close or forward it.
            return RequestHeader(key, version, correlation_id, None, 8)
        raise Malformed("request header is truncated") from None
    return RequestHeader(key, version, correlation_id, client_id, pos)


def produce_acks(
    payload: bytes | bytearray | memoryview, version: int, start: int = 0, end: int = -1
) -> int:
    """The ``acks`` of the Produce request whose api key is at ``payload[start]``, read
    within ``payload[:end]`` (-1: all of it) and only as far as that field, in place
    (``_scan.produce_acks_at``, the rule the scanner runs too).

    Raises Incomplete when the bytes end before acks, Malformed when a length before it
    cannot be (below -1, or a varint longer than 5 bytes).
    """
    at = produce_acks_at(payload, start, len(payload) if end < 0 else end, version)
    if at == NOT_HERE:
        raise Incomplete
    if at == IMPOSSIBLE:
        raise Malformed("a length before acks cannot be")
    return read_int16(payload, at)


def response_header(correlation_id: int, header_version: int) -> bytes:
    """Encode a response header (v1 carries an empty tagged-field section)."""
    if header_version == 0:
        return INT32.pack(correlation_id)
    return INT32.pack(correlation_id) + b"\x00"


def response_body_offset(payload: bytes | bytearray | memoryview, header_version: int) -> int:
    """Where the body of a response payload starts, after its v0/v1 header."""
    if len(payload) < 4:
        raise Malformed("response shorter than its correlation id")
    if header_version == 0:
        return 4
    try:
        return skip_tagged_fields(payload, 4)
    except Incomplete:
        raise Malformed("response header tagged fields are truncated") from None


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix a payload with its 4-byte length."""
    return INT32.pack(len(payload)) + bytes(payload)
