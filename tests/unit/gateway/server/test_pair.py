"""The connection pair without the event loop (``gateway.server.pair.Pair``): bytes in,
bytes out on each socket, driven directly, as h11's ``Connection`` is tested.

No socket and no event loop: the pair's two sockets are stand-ins that keep what was
written (``test_client_writes.CallsTransport``), because the pair is the part of a
connection that must not need either. The gateway, the readers, the in-flight table and
the interceptors are the real ones; every read takes the Python path (the pair's), as a
read the compiled lane leaves does.
"""

from __future__ import annotations

import struct

from gateway.config import load_config
from gateway.features.report import NO_FEATURES
from gateway.server.app import Gateway
from gateway.server.pair import Pair
from gateway.versions import gateway_supported
from tests.unit._kafka import kio_request
from tests.unit.gateway.server.test_client_writes import CallsTransport, describe_groups


def sent(socket: CallsTransport) -> bytes:
    """All that was written to ``socket``, in order."""
    return b"".join(data for call in socket.calls for data in call)


def made() -> tuple[Pair, CallsTransport, CallsTransport]:
    """A pair with its two sockets, before the upstream answered ApiVersions."""
    cfg = load_config(None, {"upstream": "127.0.0.1:9092", "listen": "127.0.0.1:0"})
    pair = Pair(Gateway(cfg), "sidecar", cfg.upstream)  # type: ignore[arg-type]
    client, upstream = CallsTransport(), CallsTransport()
    pair.client = pair.reads.client = client  # type: ignore[assignment]
    pair.upstream = pair.reads.upstream = upstream  # type: ignore[assignment]
    return pair, client, upstream


def negotiated() -> tuple[Pair, CallsTransport, CallsTransport]:
    pair, client, upstream = made()
    pair.negotiated(gateway_supported(), NO_FEATURES)
    return pair, client, upstream


def metric(pair: Pair, name: str) -> float:
    value = pair.gateway.metrics.registry.get_sample_value(name)  # type: ignore[attr-defined]
    return value or 0.0


def test_bytes_before_negotiation_wait_then_go_upstream_in_order() -> None:
    pair, client, upstream = made()
    first, _ = describe_groups(1)
    second, _ = describe_groups(2)
    pair.data_received(first + second[:7])
    pair.data_received(second[7:])
    assert sent(upstream) == b"" and pair.held_size == len(first + second)
    assert not pair.reads.scan_requests_ok  # nothing for the lane before the table
    pair.negotiated(gateway_supported(), NO_FEATURES)
    assert sent(upstream) == first + second
    assert sent(client) == b"" and pair.in_flight() == 2 and pair.held_size == 0
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
    assert sent(upstream) == asked * len(cuts)
    assert sent(client) == answer * len(cuts)
    assert pair.in_flight() == 0 and not pair.closed


def test_api_versions_is_answered_by_the_pair_itself() -> None:
    pair, client, upstream = negotiated()
    asked = kio_request(
        "api_versions", 3, 42, client_software_name="t", client_software_version="1"
    )
    pair.data_received(asked.frame)
    assert sent(upstream) == b""  # answered here, never forwarded
    size, correlation_id, error_code = struct.unpack_from(">iih", sent(client))
    assert size == len(sent(client)) - 4 and correlation_id == 42 and error_code == 0
    assert pair.in_flight() == 0


def test_an_answer_nobody_asked_for_is_dropped_and_counted() -> None:
    pair, client, _ = negotiated()
    asked, answer = describe_groups(1)
    _, stray = describe_groups(99)
    pair.data_received(asked)
    pair.upstream_data(stray + answer)
    assert sent(client) == answer
    assert metric(pair, "kafka_gateway_dropped_responses_total") == 1


def test_a_bad_frame_from_the_client_closes_both_sockets() -> None:
    pair, client, upstream = negotiated()
    asked, _ = describe_groups(1)
    pair.data_received(asked + struct.pack(">i", -5) + bytes(8))  # a negative size
    assert sent(upstream) == asked  # the whole frame before the bad one still goes out
    assert pair.closed and client.closed and upstream.closed
    assert not pair.reads.scan_requests_ok and not pair.reads.scan_responses_ok
    pair.data_received(asked)  # a read after the close is not taken
    assert sent(upstream) == asked


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
    assert sent(client) == answer and pair.closed and client.closed
