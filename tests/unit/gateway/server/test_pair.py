"""The connection pair without the event loop or a socket (``gateway.server.pair.Pair``):
bytes in, and what to send to whom and whether to close out, as h11's ``Connection``
is tested.

No socket, no transport, no event loop: each read returns the pair's outbox, and the
tests read what it says and empty it, as the sending side would. The gateway, the
readers, the in-flight table and the interceptors are the real ones; every read takes
the Python path (the pair's), as a read the compiled lane leaves does.
"""

from __future__ import annotations

import dataclasses
import struct

import pytest

from gateway.bridge.messages import encode
from gateway.config import load_config
from gateway.features.report import NO_FEATURES
from gateway.interceptors import registry
from gateway.interceptors.filter import Close
from gateway.protocol import DESCRIBE_CLUSTER
from gateway.server.app import Gateway
from gateway.server.outbox import ABORT, CLOSE, LINGER, OPEN, Outbox
from gateway.server.pair import Pair
from gateway.versions import gateway_supported
from tests.unit._kafka import kio_request
from tests.unit.gateway.server.test_client_writes import DESCRIBE_GROUPS, describe_groups


def taken(out: Outbox) -> tuple[bytes, bytes, int]:
    """(to the client, to the upstream, how it closes), emptying ``out`` as a send does."""
    sent = b"".join(out.client), b"".join(out.upstream), out.closing
    out.client.clear()
    out.upstream.clear()
    out.closing = OPEN
    return sent


def made() -> Pair:
    """A pair before the upstream answered ApiVersions."""
    cfg = load_config(None, {"upstream": "127.0.0.1:9092", "listen": "127.0.0.1:0"})
    return Pair(Gateway(cfg), "sidecar", cfg.upstream)  # type: ignore[arg-type]


def negotiated() -> Pair:
    pair = made()
    pair.negotiated(gateway_supported(), NO_FEATURES)
    assert taken(pair.outbox) == (b"", b"", OPEN)
    return pair


def api_versions(correlation_id: int) -> bytes:
    return kio_request(
        "api_versions", 3, correlation_id, client_software_name="t", client_software_version="1"
    ).frame


def metric(pair: Pair, name: str) -> float:
    value = pair.gateway.metrics.registry.get_sample_value(name)  # type: ignore[attr-defined]
    return value or 0.0


def test_bytes_before_negotiation_are_held_then_given_upstream_in_order() -> None:
    pair = made()
    first, _ = describe_groups(1)
    second, _ = describe_groups(2)
    assert taken(pair.data_received(first + second[:7])) == (b"", b"", OPEN)
    assert taken(pair.data_received(second[7:])) == (b"", b"", OPEN)
    assert pair.held_size == len(first + second)
    assert not pair.reads.scan_requests_ok  # nothing for the lane before the table
    pair.negotiated(gateway_supported(), NO_FEATURES)  # outside a read here: in the outbox
    assert taken(pair.outbox) == (b"", first + second, OPEN)
    assert pair.in_flight() == 2 and pair.held_size == 0
    assert pair.reads.scan_requests_ok and pair.reads.scan_responses_ok


def test_pipelined_requests_go_upstream_as_read_and_their_answers_back_in_one_list() -> None:
    pair = negotiated()
    requests = [describe_groups(i)[0] for i in range(1, 9)]
    answers = [describe_groups(i)[1] for i in range(1, 9)]
    out = pair.data_received(b"".join(requests))
    assert out.upstream == [b"".join(requests)] and out.client == []  # the read itself
    taken(out)
    assert pair.in_flight() == 8
    out = pair.upstream_data(b"".join(answers))
    assert b"".join(out.client) == b"".join(answers) and not out.upstream
    assert pair.in_flight() == 0 and not pair.closed


def test_a_request_and_its_response_cross_split_anywhere() -> None:
    pair = negotiated()
    asked, answer = describe_groups(7)
    for cut in range(1, min(len(asked), len(answer))):
        _, upstream_start, _ = taken(pair.data_received(asked[:cut]))
        # Mid-frame, the lane leaves that side's reads to the pair.
        assert not pair.reads.scan_requests_ok
        _, upstream_end, _ = taken(pair.data_received(asked[cut:]))
        assert upstream_start + upstream_end == asked and pair.reads.scan_requests_ok
        client_start, _, _ = taken(pair.upstream_data(answer[:cut]))
        assert not pair.reads.scan_responses_ok
        client_end, _, _ = taken(pair.upstream_data(answer[cut:]))
        assert client_start + client_end == answer and pair.reads.scan_responses_ok
    assert pair.in_flight() == 0 and not pair.closed


def test_a_request_answered_here_waits_its_turn_behind_the_brokers() -> None:
    pair = negotiated()
    first, first_answer = describe_groups(1)
    third, third_answer = describe_groups(3)
    # One read: forwarded, answered by the gateway (ApiVersions), forwarded.
    to_client, to_upstream, closing = taken(pair.data_received(first + api_versions(2) + third))
    assert to_upstream == first + third and closing == OPEN
    assert to_client == b""  # the broker has not answered the first yet
    to_client, to_upstream, closing = taken(pair.upstream_data(first_answer + third_answer))
    assert to_upstream == b"" and closing == OPEN
    assert to_client.startswith(first_answer) and to_client.endswith(third_answer)
    local = to_client[len(first_answer) : -len(third_answer)]
    size, correlation_id, error_code = struct.unpack_from(">iih", local)
    assert size == len(local) - 4 and correlation_id == 2 and error_code == 0
    assert pair.in_flight() == 0


def test_an_answer_nobody_asked_for_is_dropped_and_counted() -> None:
    pair = negotiated()
    asked, answer = describe_groups(1)
    _, stray = describe_groups(99)
    taken(pair.data_received(asked))
    assert taken(pair.upstream_data(stray + answer)) == (answer, b"", OPEN)
    assert metric(pair, "kafka_gateway_dropped_responses_total") == 1


def test_a_bad_frame_from_the_client_closes_both_sockets_after_what_came_before() -> None:
    pair = negotiated()
    asked, _ = describe_groups(1)
    out = pair.data_received(asked + struct.pack(">i", -5) + bytes(8))  # a negative size
    # The whole frame before the bad one still goes out, then both close.
    assert taken(out) == (b"", asked, CLOSE)
    assert pair.closed
    assert not pair.reads.scan_requests_ok and not pair.reads.scan_responses_ok
    assert taken(pair.data_received(asked)) == (b"", b"", OPEN)  # a read after it: not taken


def test_a_bad_frame_from_the_upstream_closes_after_the_whole_answers_before_it() -> None:
    pair = negotiated()
    first, first_answer = describe_groups(1)
    second, _ = describe_groups(2)
    taken(pair.data_received(first + second))
    out = pair.upstream_data(first_answer + struct.pack(">i", -1) + bytes(8))
    assert taken(out) == (first_answer, b"", CLOSE)
    assert pair.closed


def test_an_answer_made_outside_a_read_is_told_to_the_adapter_once() -> None:
    """As UpdateFeatures' answer, made by a task once ZooKeeper answered (exchange.spawn):
    no read returns it, so the pair tells ``on_output``."""
    pair = negotiated()
    told: list[tuple[bytes, bytes, int]] = []
    pair.on_output = lambda out: told.append(taken(out))
    entry = pair.inflight.add(DESCRIBE_GROUPS, 0, 4, to_upstream=False)  # the task's request
    pair.exchange.answer(entry, struct.pack(">ii", 4, 0))
    assert told == [(describe_groups(4)[1], b"", OPEN)]
    # In a read, what the interceptors answer goes with the read's return: not told.
    out = pair.data_received(api_versions(5))
    assert told == [(describe_groups(4)[1], b"", OPEN)]
    assert struct.unpack_from(">i", b"".join(out.client), 4)[0] == 5


def test_a_close_from_outside_a_read_is_told_to_the_adapter() -> None:
    pair = negotiated()
    told: list[tuple[bytes, bytes, int]] = []
    pair.on_output = lambda out: told.append(taken(out))
    asked, answer = describe_groups(1)
    taken(pair.data_received(asked))
    pair.drain()  # shutdown: no new request is read, the last answer closes it
    assert told == [] and not pair.closed
    assert taken(pair.upstream_data(answer)) == (answer, b"", LINGER)
    assert told == [] and pair.closed  # the read's return carried the close
    pair.abort()  # drain_timeout_s passed: what is left is cut off, now
    assert told == [(b"", b"", ABORT)]


def test_an_abort_drops_what_was_not_sent() -> None:
    pair = negotiated()
    asked, _ = describe_groups(1)
    out = pair.data_received(asked)
    pair.abort()
    assert taken(out) == (b"", b"", ABORT)


def test_a_client_gone_mid_request_is_an_abort_and_takes_the_upstream() -> None:
    pair = negotiated()
    asked, _ = describe_groups(1)
    taken(pair.data_received(asked[:9]))
    pair.client_lost()
    assert metric(pair, "kafka_gateway_client_aborts_total") == 1
    assert pair.closed and taken(pair.outbox) == (b"", b"", CLOSE)
    assert pair.requests.buffered == 0 and pair.held_size == 0


def test_a_response_hook_that_closes_closes_after_the_whole_answers_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # DescribeCluster's response hook swapped for one that closes (no real filter closes
    # on a response today; the verdict is part of what a hook may return).
    declared = registry.FILTERS[DESCRIBE_CLUSTER]
    closing = Close("malformed_frame", "the broker said so")
    monkeypatch.setitem(
        registry.FILTERS,
        DESCRIBE_CLUSTER,
        dataclasses.replace(declared, on_response=lambda ctx, entry, body: closing),
    )
    pair = negotiated()
    first, first_answer = describe_groups(1)
    taken(
        pair.data_received(
            first
            + kio_request(
                "describe_cluster", 0, 2, include_cluster_authorized_operations=False
            ).frame
        )
    )
    body = encode(
        "DescribeClusterResponse",
        0,
        {"ErrorMessage": None, "ClusterId": "c", "ControllerId": 1, "Brokers": []},
    )
    cluster_answer = struct.pack(">ii", 4 + 1 + len(body), 2) + b"\0" + body
    out = pair.upstream_data(first_answer + cluster_answer)
    assert taken(out) == (first_answer, b"", CLOSE)
    assert pair.closed
    refused = [
        sample.value
        for sample in pair.gateway.metrics.rejected.collect()[0].samples
        if sample.name.endswith("_total")
        and sample.labels["listener"] == "sidecar"
        and sample.labels["reason"] == "malformed_frame"
    ]
    assert refused == [1]
