"""A relay in front of a real broker that answers chosen API keys itself.

For the few responses no real broker produces on demand: a vendor's API key (Tansu, like
Kafka, closes on keys it does not know), or a Produce answer carrying KIP-951
NodeEndpoints (a leader change), an ApiVersions answer advertising less than the broker
does (``capped_api_versions``). Every other request goes to the broker. Requests are
relayed one at a time per connection, so responses keep request order.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

from .ports import LOOPBACK, free_port

# (correlation id, request payload without its length prefix) -> response payload.
Answer = Callable[[int, bytes], bytes]

_INT32 = struct.Struct(">i")


def _read_exact(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _read_exact(sock, 4)
    return None if head is None else _read_exact(sock, _INT32.unpack(head)[0])


def capped_api_versions(upstream: tuple[str, int], key: int, max_version: int) -> Answer:
    """An answer for ApiVersions (key 18): the broker's own answer, with ``key``'s max
    version lowered to ``max_version``, so a client (a gateway) has a version above the
    advertised max to be refused whatever the broker."""

    def answer(_correlation_id: int, request: bytes) -> bytes:
        with socket.create_connection(upstream, timeout=10) as broker:
            broker.sendall(_INT32.pack(len(request)) + request)
            frame = _read_frame(broker)
        if frame is None:
            raise ConnectionError("the broker closed the connection before answering")
        response = bytearray(frame)
        (version,) = struct.unpack_from(">h", request, 2)
        offset = 4 + 2  # correlation id (response header v0), error code
        if version >= 3:  # compact array (a one-byte uvarint); each entry ends in 0 tags
            count, width, offset = response[offset] - 1, 7, offset + 1
        else:
            (count,) = _INT32.unpack_from(response, offset)
            width, offset = 6, offset + 4
        for entry in range(offset, offset + count * width, width):
            if struct.unpack_from(">h", response, entry)[0] == key:
                struct.pack_into(">h", response, entry + 4, max_version)
                return bytes(response)
        raise ValueError(f"the broker does not advertise API key {key}")

    return answer


class AnsweringRelay:
    """``with AnsweringRelay(("127.0.0.1", 9092), {key: answer}) as relay:`` listens on
    ``relay.bootstrap``; ``relay.answered`` holds the requests it answered itself."""

    def __init__(self, upstream: tuple[str, int], answers: dict[int, Answer]) -> None:
        self.upstream = upstream
        self.answers = answers
        self.port = free_port()
        self.answered: list[bytes] = []
        self._server = socket.create_server((LOOPBACK, self.port))
        self._server.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.upstream, timeout=10) as broker:
            while (request := _read_frame(client)) is not None:
                key, _, correlation_id = struct.unpack_from(">hhi", request)
                answer = self.answers.get(key)
                if answer is not None:
                    self.answered.append(request)
                    response: bytes | None = answer(correlation_id, request)
                else:
                    broker.sendall(_INT32.pack(len(request)) + request)
                    response = _read_frame(broker)
                    if response is None:
                        return
                client.sendall(_INT32.pack(len(response)) + response)

    def __enter__(self) -> AnsweringRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()
