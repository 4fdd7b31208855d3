"""The connection pair without the event loop (``gateway.server.pair.Pair``): bytes in,
bytes out on each socket, driven directly, as h11's ``Connection`` is tested.

No socket and no event loop: the pair's two sockets are stand-ins that keep what was
written (``tests.unit._connection.RecordingTransport``, keeping the bytes), because the
pair is the part of a connection that must not need either. The gateway, the readers,
the in-flight table and the interceptors are the real ones; every read takes the Python
path (the pair's), as a read the compiled lane leaves does.
"""

from __future__ import annotations

import struct

from gateway.config import load_config
from gateway.features.report import NO_FEATURES
from gateway.server.app import Gateway
from gateway.server.pair import Pair
from gateway.versions import gateway_supported
from tests.unit._connection import RecordingTransport
from tests.unit._kafka import kio_request, request

DESCRIBE_GROUPS = 15


class Socket(RecordingTransport):
    """Keeps the bytes written, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = bytearray()
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        super().write(data)
        self.sent += data

    def abort(self) -> None:
        self.aborted = True


def made() -> tuple[Pair, Socket, Socket]:
    """A pair with its two sockets, before the upstream answered ApiVersions."""
    cfg = load_config(None, {"upstream": "127.0.0.1:9092", "listen": "127.0.0.1:0"})
    pair = Pair(Gateway(cfg), "sidecar", cfg.upstream)  # type: ignore[arg-type]
    client, upstream = Socket(), Socket()
    pair.client = pair.reads.client = client
    pair.upstream = pair.reads.upstream = upstream
    return pair, client, upstream


def negotiated() -> tuple[Pair, Socket, Socket]:
    pair, client, upstream = made()
    pair.negotiated(gateway_supported(), NO_FEATURES)
    return pair, client, upstream


def describe_groups(correlation_id: int) -> tuple[bytes, bytes]:
    """(request, response) of DescribeGroups v0: no interceptor takes either."""
    asked = request(DESCRIBE_GROUPS, 0, correlation_id, struct.pack(">i", 0), header_version=1)
    answer = struct.pack(">ii", correlation_id, 0)  # no groups
    return asked.frame, struct.pack(">i", len(answer)) + answer


def metric(pair: Pair, name: str) -> float:
    value = pair.gateway.metrics.registry.get_sample_value(name)  # type: ignore[attr-defined]
    return value or 0.0


def test_bytes_before_negotiation_wait_then_go_upstream_in_order() -> None:
    pair, client, upstream = made()
    first, _ = describe_groups(1)
    second, _ = describe_groups(2)
    pair.data_received(first + second[:7])
    pair.data_received(second[7:])
    assert upstream.sent == b"" and pair.held_size == len(first + second)
    assert not pair.reads.scan_requests_ok  # nothing for the lane before the table
    pair.negotiated(gateway_supported(), NO_FEATURES)
    assert upstream.sent == first + second
    assert client.sent == b"" and pair.in_flight() == 2 and pair.held_size == 0
    assert pair.reads.scan_requests_ok and pair.reads.scan_responses_ok


def test_a_request_and_its_response_cross_split_anywhere() -> None:
    pair, client, upstream = negotiated()
    asked, answer = describe_groups(7)
    cuts = range(1, min(len(asked), len(answer)))
    for cut in cuts:
        pair.data_received(asked[:cut])
        # Mid-frame, the lane leaves that side's reads to the pair.
        assert not pair.reads.scan_requests_ok
        pair.data_received(asked[cut:])
        assert pair.reads.scan_requests_ok
        pair.upstream_data(answer[:cut])
        assert not pair.reads.scan_responses_ok
        pair.upstream_data(answer[cut:])
        assert pair.reads.scan_responses_ok
    assert upstream.sent == asked * len(cuts)
    assert client.sent == answer * len(cuts)
    assert pair.in_flight() == 0 and not pair.closed


def test_api_versions_is_answered_by_the_pair_itself() -> None:
    pair, client, upstream = negotiated()
    asked = kio_request(
        "api_versions", 3, 42, client_software_name="t", client_software_version="1"
    )
    pair.data_received(asked.frame)
    assert upstream.sent == b""  # answered here, never forwarded
    size, correlation_id, error_code = struct.unpack_from(">iih", client.sent)
    assert size == len(client.sent) - 4 and correlation_id == 42 and error_code == 0
    assert pair.in_flight() == 0


def test_an_answer_nobody_asked_for_is_dropped_and_counted() -> None:
    pair, client, _ = negotiated()
    asked, answer = describe_groups(1)
    _, stray = describe_groups(99)
    pair.data_received(asked)
    pair.upstream_data(stray + answer)
    assert client.sent == answer
    assert metric(pair, "kafka_gateway_dropped_responses_total") == 1


def test_a_bad_frame_from_the_client_closes_both_sockets() -> None:
    pair, client, upstream = negotiated()
    asked, _ = describe_groups(1)
    pair.data_received(asked + struct.pack(">i", -5) + bytes(8))  # a negative size
    assert upstream.sent == asked  # the whole frame before the bad one still goes out
    assert pair.closed and client.closed and upstream.closed
    assert not pair.reads.scan_requests_ok and not pair.reads.scan_responses_ok
    pair.data_received(asked)  # a read after the close is not taken
    assert upstream.sent == asked


def test_a_client_gone_mid_request_is_an_abort_and_takes_the_upstream() -> None:
    pair, _, upstream = negotiated()
    asked, _ = describe_groups(1)
    pair.data_received(asked[:9])
    pair.client_lost()
    assert metric(pair, "kafka_gateway_client_aborts_total") == 1
    assert pair.closed and upstream.closed
    assert pair.requests.buffered == 0 and pair.held_size == 0


def test_draining_closes_once_the_last_answer_went_out() -> None:
    pair, client, _ = negotiated()
    asked, answer = describe_groups(1)
    pair.data_received(asked)
    pair.drain()
    assert not pair.closed and not client.reading  # no new request is read
    pair.upstream_data(answer)
    assert client.sent == answer and pair.closed and client.closed
