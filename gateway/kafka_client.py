"""Speaking Kafka as a client: request framing, answer matching, and one connection in
an asyncio and a blocking form.

Every request the gateway makes of a broker for itself on a connection of its own goes
through here: the start-up probe and ``/readyz``'s check (ApiVersions), and SNI's
lookup of unknown brokers (Metadata). So do featurectl, the test harness and the bench,
through ``gateway.wire``. (The ApiVersions the proxy sends on a client's own upstream
connection is another matter: it shares that connection with the client's requests, see
``gateway.interceptors.upstream``.)

The framing is sans-I/O (``Requests``): numbering, the request header a version
needs, and the check that an answer is the one asked for. The two connections only
move its bytes.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import ssl
from typing import Any, Self

from . import __version__
from .features.report import FeatureReport
from .protocol import (
    API_VERSIONS,
    INT16,
    INT32,
    METADATA,
    api_spec,
    decode_response,
    encode_request,
    frame,
    request_schema,
    response_body_offset,
    strip_unknown_tags,
    write_uvarint,
)
from .versions import ApiVersionsError, VersionRange, parse_upstream_api_versions

GATEWAY_SOFTWARE_NAME = "kafka-gateway"
GATEWAY_CLIENT_ID = "kafka-gateway"

#: The versions of ApiVersions the gateway asks an upstream, newest first, each tried when
#: the broker refused the one before: v4 brings every supported feature (a v3 answer
#: leaves out those whose min level is 0, KIP-1022), v3 is what brokers before 3.9 know,
#: v0 what every broker answers.
UPSTREAM_API_VERSIONS = (4, 3, 0)

# The newest Metadata version the probes send; older ones where the broker offers no
# more. v0 is never sent: there an empty topic list means every topic, not none.
METADATA_MAX = 12


class WrongAnswer(ValueError):
    """The peer answered with another correlation id than the request's."""


def request_header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    header_version: int | None = None,
) -> bytes:
    """A request header: v1 (key, version, correlation id, client id as a classic
    nullable string), v2 adds an empty tagged section, v0 has no client id.

    ``header_version`` None: the one the API's version uses (``ApiSpec``); v1 for a key
    the gateway does not know, as ``parse_request_header`` reads it.
    """
    if header_version is None:
        spec = api_spec(api_key)
        header_version = spec.request_header_version(api_version) if spec is not None else 1
    out = INT16.pack(api_key) + INT16.pack(api_version) + INT32.pack(correlation_id)
    if header_version >= 1:
        if client_id is None:
            out += INT16.pack(-1)
        else:
            raw = client_id.encode()
            out += INT16.pack(len(raw)) + raw
    if header_version >= 2:
        out += write_uvarint(0)
    return out


def request_frame(
    api_key: int, api_version: int, correlation_id: int, body: bytes, client_id: str | None
) -> bytes:
    """A whole request frame: length, the header its version uses, ``body``."""
    return frame(request_header(api_key, api_version, correlation_id, client_id) + body)


def response_body(api_key: int, api_version: int, payload: bytes | memoryview) -> memoryview:
    """The body of a response payload (after the length), past the header its version uses."""
    spec = api_spec(api_key)
    header_version = spec.response_header_version(api_version) if spec is not None else 0
    view = memoryview(payload)
    return view[response_body_offset(view, header_version) :]


def api_versions_request(version: int, software_name: str, software_version: str) -> Any:
    """An ApiVersions request entity; from v3 on it names the client software (KIP-511)."""
    schema: Any = request_schema(API_VERSIONS, version)
    if version < 3:
        return schema()
    return schema(client_software_name=software_name, client_software_version=software_version)


def metadata_request(version: int) -> Any:
    """A Metadata request (v1+) for no topics: brokers, cluster id and controller only."""
    schema: Any = request_schema(METADATA, version)
    fields = set(schema.__dataclass_fields__)
    wanted = {
        "topics": (),
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    return schema(**{k: v for k, v in wanted.items() if k in fields})


def metadata_version(ranges: dict[int, VersionRange], newest: int = METADATA_MAX) -> int | None:
    """The Metadata version to ask a broker that advertised ``ranges``; None when it
    offers none from v1 to ``newest``."""
    low, high = ranges.get(METADATA, (0, -1))
    version = min(high, newest)
    return version if version >= max(low, 1) else None


class Requests:
    """One connection's requests, without I/O: numbers them, frames them, and checks
    that each answer is the one asked for."""

    def __init__(self, client_id: str | None) -> None:
        self.client_id = client_id
        self._ids = itertools.count(1)

    def frame(self, api_key: int, api_version: int, body: bytes) -> tuple[int, bytes]:
        """(correlation id, frame) of the next request."""
        correlation_id = next(self._ids)
        return correlation_id, request_frame(
            api_key, api_version, correlation_id, body, self.client_id
        )

    @staticmethod
    def answer(
        api_key: int, api_version: int, correlation_id: int, payload: bytes | memoryview
    ) -> memoryview:
        """The response body of ``payload``; WrongAnswer when it answers another request."""
        if len(payload) < 4 or INT32.unpack_from(payload)[0] != correlation_id:
            raise WrongAnswer(f"an answer to another request than {correlation_id}")
        return response_body(api_key, api_version, payload)


def decode_answer(api_key: int, api_version: int, body: bytes | memoryview) -> Any:
    """A response body decoded by kio, top-level tags it does not know set aside."""
    return decode_response(api_key, api_version, strip_unknown_tags(api_key, api_version, body))


class AsyncKafkaConnection:
    """One asyncio connection to a broker (or a gateway), one request at a time."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str | None
    ) -> None:
        self._reader, self._writer = reader, writer
        self._requests = Requests(client_id)

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        timeout_s: float | None = None,
        client_id: str | None = GATEWAY_CLIENT_ID,
    ) -> Self:
        """Connect (and shake hands, with ``tls``) within ``timeout_s`` (None: no limit)."""
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=tls, server_hostname=server_hostname),
            timeout_s,
        )
        return cls(reader, writer, client_id)

    async def roundtrip(self, api_key: int, api_version: int, body: bytes) -> memoryview:
        """Send one request; the body of its answer."""
        correlation_id, request = self._requests.frame(api_key, api_version, body)
        self._writer.write(request)
        (size,) = INT32.unpack(await self._reader.readexactly(4))
        payload = await self._reader.readexactly(size)
        return self._requests.answer(api_key, api_version, correlation_id, payload)

    async def request(self, entity: Any) -> Any:
        """Send a kio request entity; its answer, decoded."""
        api_key, version = int(entity.__api_key__), int(entity.__version__)
        body = await self.roundtrip(api_key, version, encode_request(entity))
        return decode_answer(api_key, version, body)

    async def api_versions(
        self, versions: tuple[int, ...] = UPSTREAM_API_VERSIONS
    ) -> tuple[dict[int, VersionRange], FeatureReport]:
        """ApiVersions at each of ``versions`` in turn until one is answered: the
        ranges and the features the broker reports. ValueError when none is."""
        for version in versions:
            request = api_versions_request(version, GATEWAY_SOFTWARE_NAME, __version__)
            body = await self.roundtrip(API_VERSIONS, version, encode_request(request))
            try:
                return parse_upstream_api_versions(body, version)
            except ApiVersionsError:
                continue
        raise ValueError(f"the upstream refused ApiVersions v{versions[-1]}")

    async def metadata(self, ranges: dict[int, VersionRange]) -> Any:
        """Metadata for no topics at the newest version ``ranges`` (the broker's
        ApiVersions) allow; ValueError when they allow none the client reads."""
        version = metadata_version(ranges)
        if version is None:
            raise ValueError("the upstream offers no Metadata version the gateway reads")
        return await self.request(metadata_request(version))

    def close(self) -> None:
        self._writer.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class KafkaConnection:
    """One blocking connection to a broker (or a gateway), one request at a time, for
    tools. Errors are the socket's (OSError, TimeoutError), ConnectionError when the
    peer closes mid-answer, WrongAnswer."""

    def __init__(self, sock: socket.socket, client_id: str | None) -> None:
        self.sock = sock
        self._requests = Requests(client_id)

    @classmethod
    def open(
        cls,
        host: str,
        port: int,
        *,
        timeout_s: float | None,
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        client_id: str | None = GATEWAY_CLIENT_ID,
    ) -> Self:
        """Connect (and shake hands, with ``tls``); ``timeout_s`` holds for every read."""
        sock = socket.create_connection((host, port), timeout=timeout_s)
        try:
            if tls is not None:
                sock = tls.wrap_socket(sock, server_hostname=server_hostname or host)
        except BaseException:
            sock.close()
            raise
        return cls(sock, client_id)

    def read_exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self.sock.recv(size - len(chunks))
            if not chunk:
                raise ConnectionError("the connection was closed before the answer was complete")
            chunks += chunk
        return bytes(chunks)

    def roundtrip(self, api_key: int, api_version: int, body: bytes) -> bytes:
        """Send one request; the body of its answer."""
        correlation_id, request = self._requests.frame(api_key, api_version, body)
        self.sock.sendall(request)
        (size,) = INT32.unpack(self.read_exactly(4))
        payload = self.read_exactly(size)
        return bytes(self._requests.answer(api_key, api_version, correlation_id, payload))

    def request(self, entity: Any) -> Any:
        """Send a kio request entity; its answer, decoded by kio."""
        api_key, version = int(entity.__api_key__), int(entity.__version__)
        body = self.roundtrip(api_key, version, encode_request(entity))
        return decode_response(api_key, version, body)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def probe_api_versions(
    host: str,
    port: int,
    tls: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> tuple[dict[int, VersionRange], FeatureReport]:
    """Ask a broker ApiVersions on a connection of its own (``UPSTREAM_API_VERSIONS`` in
    turn): its ranges and the features it reports."""
    conn = await AsyncKafkaConnection.open(host, port, tls=tls, server_hostname=server_hostname)
    async with conn:
        return await conn.api_versions()


async def probe_metadata(
    host: str,
    port: int,
    tls: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    timeout_s: float | None = None,
) -> Any:
    """A broker's Metadata for no topics (its brokers, cluster id, controller), on a
    connection of its own opened within ``timeout_s``."""
    conn = await AsyncKafkaConnection.open(
        host, port, tls=tls, server_hostname=server_hostname, timeout_s=timeout_s
    )
    async with conn:
        ranges, _features = await conn.api_versions((0,))
        return await conn.metadata(ranges)
