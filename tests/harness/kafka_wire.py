"""A tiny blocking Kafka wire client for raw protocol tests.

Real clients hide exactly what protocol tests must see (header versions, correlation
ids, a connection the broker closes, a response that never comes), so this connection
lets a test choose each of them: ``int32 length | request header | body`` out, ``int32
length | response header | body`` in. Bodies are either raw bytes or ``kio`` entities,
which are generated from Apache Kafka's message JSON files; headers, codecs and
varints are the gateway's own (``gateway.wire``).

Header rules (see docs/kafka-protocol-notes.md): request header v2 for flexible
versions, v1 otherwise; response header v1 for flexible versions, except ApiVersions,
whose response header is always v0.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from types import EllipsisType
from typing import Any, Self

from kio.index import load_response_schema

from gateway import wire
from gateway.wire import (
    API_VERSIONS,
    Incomplete,
    api_spec,
    decode,
    encode,
    read_uvarint,
    request_header,
    write_uvarint,
)

__all__ = [
    "ApiVersions",
    "ConnectionClosed",
    "KafkaConnection",
    "Response",
    "decode",
    "encode",
    "encode_request_header",
    "is_flexible",
    "parse_api_versions",
    "read_tagged_fields",
]

_INT32 = struct.Struct(">i")


class ConnectionClosed(ConnectionError):
    """The peer closed the connection (possibly in the middle of a frame)."""


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether (api_key, api_version) uses flexible encoding (header v2 / response v1).

    Versions newer than kio knows keep the flexibility of the newest known one (versions
    never become non-flexible); this is how a v99 ApiVersions request still gets a v2
    header. An unknown key is flexible from 50 on (everything added since KIP-482).
    """
    spec = api_spec(api_key)
    return spec.is_flexible(api_version) if spec is not None else api_key >= 50


def encode_request_header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    header_version: int,
) -> bytes:
    """Request header v0/v1/v2 (v2 = v1 + an empty tagged-field section), the version
    given rather than the one the API uses, so a test can send a wrong one.

    client_id is a *classic* nullable string (int16 length, -1 = null) in v1 and v2.
    """
    return request_header(api_key, api_version, correlation_id, client_id, header_version)


def _read_uvarint(data: bytes, offset: int) -> tuple[int, int]:
    try:
        return read_uvarint(data, offset)
    except Incomplete:
        raise ValueError("truncated unsigned varint") from None


def read_tagged_fields(data: bytes, offset: int) -> tuple[dict[int, bytes], int]:
    """Read a tagged-field section into {tag: raw bytes}; return it and the next offset."""
    try:
        return wire.read_tagged_fields(data, offset)
    except Incomplete:
        raise ValueError("a tagged-field section runs past the end of the frame") from None


def skip_tagged_fields(data: bytes, offset: int) -> int:
    """Skip a tagged-field section starting at *offset*; return the offset after it."""
    return read_tagged_fields(data, offset)[1]


def _compact_string(value: str) -> bytes:
    raw = value.encode()
    return write_uvarint(len(raw) + 1) + raw


@dataclass(frozen=True)
class ApiVersions:
    """An ApiVersions response body, parsed by hand.

    By hand because kio 0.6's readers raise KeyError on tagged fields they do not
    know, while KIP-482 says unknown tags must be skipped -- and tests need to see
    exactly those (e.g. tags a gateway adds). ``tagged`` holds the top-level tagged
    fields as raw bytes (tag 0 SupportedFeatures, 1 FinalizedFeaturesEpoch,
    2 FinalizedFeatures, 3 ZkMigrationReady, or anything else).
    """

    error_code: int
    api_keys: dict[int, tuple[int, int]]
    throttle_time_ms: int | None
    tagged: dict[int, bytes]
    #: The version the body was parsed as (0 when an error answer used the v0 layout).
    parsed_as: int


UNSUPPORTED_VERSION = 35


def parse_api_versions(body: bytes, version: int) -> ApiVersions:
    """Parse an ApiVersions response *body* (after the v0 response header).

    A broker answers a too-new request in the v0 layout with error 35; that case is
    detected and parsed as v0 whatever *version* says.
    """
    (error_code,) = struct.unpack_from(">h", body, 0)
    if error_code == UNSUPPORTED_VERSION and version >= 3:
        version = 0
    offset = 2
    api_keys: dict[int, tuple[int, int]] = {}
    if version >= 3:
        count_plus_one, offset = _read_uvarint(body, offset)
        count = max(count_plus_one - 1, 0)
    else:
        (count,) = struct.unpack_from(">i", body, offset)
        offset += 4
        count = max(count, 0)
    for _ in range(count):
        key, low, high = struct.unpack_from(">hhh", body, offset)
        offset += 6
        if version >= 3:
            _, offset = read_tagged_fields(body, offset)
        api_keys[key] = (low, high)
    throttle: int | None = None
    if version >= 1:
        (throttle,) = struct.unpack_from(">i", body, offset)
        offset += 4
    tagged: dict[int, bytes] = {}
    if version >= 3:
        tagged, offset = read_tagged_fields(body, offset)
    if offset != len(body):
        raise ValueError(f"ApiVersions v{version}: {len(body) - offset} trailing bytes")
    return ApiVersions(error_code, api_keys, throttle, tagged, version)


@dataclass(frozen=True)
class Response:
    """A response frame split into correlation id and body (header already removed)."""

    correlation_id: int
    body: bytes
    frame: bytes


class KafkaConnection:
    """One blocking TCP connection that sends hand-framed Kafka requests.

    ``send()`` returns the correlation id used; ``recv()`` returns the next frame's
    correlation id and body. ``request()`` pairs both and checks the id. Timeouts raise
    ``TimeoutError``; a closed connection raises ``ConnectionClosed``.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float = 5.0,
        client_id: str | None = "kafka-gateway-tests",
    ) -> None:
        self.timeout = timeout
        self.client_id = client_id
        self._next_id = 1
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # -- sending ------------------------------------------------------------------

    def send_frame(self, payload: bytes) -> None:
        """Send *payload* with its int32 length prefix (anything, even garbage)."""
        self._sock.sendall(_INT32.pack(len(payload)) + payload)

    def send(
        self,
        api_key: int,
        api_version: int,
        body: bytes | Any,
        *,
        correlation_id: int | None = None,
        client_id: str | EllipsisType | None = ...,
        header_version: int | None = None,
    ) -> int:
        """Frame and send one request; *body* is bytes or a kio entity. Return the id.

        *header_version* defaults to 2 for flexible versions, else 1.
        """
        if correlation_id is None:
            correlation_id = self._next_id
        self._next_id = correlation_id + 1
        if header_version is None:
            header_version = 2 if is_flexible(api_key, api_version) else 1
        cid = self.client_id if client_id is ... else client_id
        assert cid is None or isinstance(cid, str)
        raw_body = body if isinstance(body, bytes | bytearray) else encode(body)
        header = encode_request_header(api_key, api_version, correlation_id, cid, header_version)
        self.send_frame(header + bytes(raw_body))
        return correlation_id

    # -- receiving ----------------------------------------------------------------

    def _recv_exact(self, size: int, timeout: float | None) -> bytes:
        self._sock.settimeout(self.timeout if timeout is None else timeout)
        chunks: list[bytes] = []
        remaining = size
        while remaining:
            try:
                chunk = self._sock.recv(min(remaining, 1 << 20))
            except TimeoutError:
                raise
            except OSError as exc:  # reset by peer and friends
                raise ConnectionClosed(str(exc)) from exc
            if not chunk:
                got = size - remaining
                raise ConnectionClosed(f"connection closed after {got} of {size} bytes")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def recv_frame(self, timeout: float | None = None) -> bytes:
        """Read one length-prefixed frame and return its payload."""
        (size,) = _INT32.unpack(self._recv_exact(4, timeout))
        if size < 0:
            raise ValueError(f"negative frame length {size}")
        return self._recv_exact(size, timeout)

    def recv(self, *, flexible_header: bool, timeout: float | None = None) -> Response:
        """Read one response; *flexible_header* means response header v1 (tagged fields)."""
        frame = self.recv_frame(timeout)
        (correlation_id,) = _INT32.unpack_from(frame, 0)
        offset = 4
        if flexible_header:
            offset = skip_tagged_fields(frame, offset)
        return Response(correlation_id, frame[offset:], frame)

    def request(
        self,
        api_key: int,
        api_version: int,
        body: bytes | Any,
        *,
        timeout: float | None = None,
        **send_kwargs: Any,
    ) -> Response:
        """Send one request and return its response (checks the correlation id)."""
        correlation_id = self.send(api_key, api_version, body, **send_kwargs)
        flexible = api_key != API_VERSIONS and is_flexible(api_key, api_version)
        response = self.recv(flexible_header=flexible, timeout=timeout)
        if response.correlation_id != correlation_id:
            raise AssertionError(
                f"response correlation id {response.correlation_id} != request {correlation_id}"
            )
        return response

    def request_entity(self, request: Any, *, timeout: float | None = None) -> Any:
        """Send a kio request entity; parse and return the matching kio response entity."""
        api_key = int(request.__api_key__)
        api_version = int(request.__version__)
        response = self.request(api_key, api_version, request, timeout=timeout)
        return decode(load_response_schema(api_key, api_version), response.body)

    def api_versions(self, version: int = 0, *, timeout: float | None = None) -> ApiVersions:
        """Send ApiVersions at *version* and parse the answer by hand (see ApiVersions)."""
        body = b""
        if version >= 3:
            body = _compact_string("kafka-gateway-tests") + _compact_string("1") + b"\x00"
        response = self.request(API_VERSIONS, version, body, timeout=timeout)
        return parse_api_versions(response.body, version)

    def expect_closed(self, timeout: float = 5.0) -> bool:
        """True if the peer closes the connection within *timeout* without sending data.

        Raises AssertionError if data arrives instead (the caller expected silence + EOF).
        """
        deadline = time.monotonic() + timeout
        self._sock.settimeout(0.1)
        while time.monotonic() < deadline:
            try:
                data = self._sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return True
            if not data:
                return True
            raise AssertionError(f"expected the connection to close, got {len(data)} bytes")
        return False

    # -- lifecycle ----------------------------------------------------------------

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Features:
    """KIP-584 fields of an ApiVersions v3+ answer, parsed by hand from its tags."""

    supported: dict[str, tuple[int, int]]
    finalized: dict[str, tuple[int, int]]  # name -> (min_version_level, max_version_level)
    epoch: int


def parse_features(answer: ApiVersions) -> Features:
    def read_string(data: bytes, offset: int) -> tuple[str, int]:
        length_plus_one, offset = _read_uvarint(data, offset)
        end = offset + length_plus_one - 1
        return data[offset:end].decode(), end

    def read_array(data: bytes) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        count_plus_one, offset = _read_uvarint(data, 0)
        for _ in range(count_plus_one - 1):
            name, offset = read_string(data, offset)
            first, second = struct.unpack_from(">hh", data, offset)
            offset = skip_tagged_fields(data, offset + 4)
            out[name] = (first, second)
        return out

    supported = read_array(answer.tagged[0]) if 0 in answer.tagged else {}
    # FinalizedFeatureKey is (name, max_version_level, min_version_level): swap to (min, max).
    finalized_raw = read_array(answer.tagged[2]) if 2 in answer.tagged else {}
    finalized = {name: (low, high) for name, (high, low) in finalized_raw.items()}
    epoch = struct.unpack(">q", answer.tagged[1])[0] if 1 in answer.tagged else -1
    return Features(supported, finalized, epoch)
