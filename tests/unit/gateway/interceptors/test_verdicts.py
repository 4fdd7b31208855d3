"""A hook's verdict carried out (gateway.interceptors.verdicts): each kind becomes exactly
the connection's actions it names, and nothing else.

The connection is a recording stand-in for ``Exchange`` (what a verdict may do to it);
on real sockets, each kind is exercised by a real filter: ApiVersions answers,
SaslAuthenticate forwards as it came (test_sasl_principals.py), DescribeCluster asks the
upstream first (test_api_versions_wire.py), UpdateFeatures answers later, from
ZooKeeper (test_update_features*.py), the bridge forwards an acks=0 produce unanswered
(test_bridge.py)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.interceptors import dispatch, registry
from gateway.interceptors.filter import (
    AS_IT_CAME,
    Answer,
    AskUpstream,
    Close,
    Forward,
    Later,
    RequestVerdict,
)
from gateway.interceptors.verdicts import carry_out
from gateway.kafka_client import request_frame
from gateway.protocol import (
    SASL_AUTHENTICATE,
    InFlight,
    RequestFrame,
    ResponseFrame,
    parse_request_header,
)


@dataclass
class Recorded:
    """Every action taken on the connection, in order."""

    actions: list[tuple[Any, ...]] = field(default_factory=list)
    handlers: list[Callable[[memoryview], None]] = field(default_factory=list)
    tasks: list[Coroutine[Any, Any, None]] = field(default_factory=list)
    closed: bool = False

    def forward(self, request: RequestFrame) -> None:
        self.actions.append(("forward", request.frame, request.request))

    def send_unanswered(self, entry: Any, frame: bytes) -> None:
        self.actions.append(("unanswered", frame, entry))

    def answer(self, entry: Any, payload: bytes) -> None:
        self.actions.append(("answer", payload, entry))

    def ask_upstream(self, api_key: int, build: Any, handler: Any) -> int:
        version, frame = build(-7)
        self.actions.append(("ask", api_key, version, frame))
        self.handlers.append(handler)
        return int(version)

    def violation(self, side: str, reason: str, detail: str) -> None:
        self.actions.append(("violation", side, reason, detail))
        self.closed = True

    def rewrite_failed(self, entry: Any, error: str) -> None:
        self.actions.append(("rewrite_failed", error))

    def close(self) -> None:
        self.actions.append(("close",))
        self.closed = True

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(work)

    def who(self) -> dict[str, object]:
        return {"peer": "127.0.0.1:1"}


def held_back(version: int = 3, correlation_id: int = 41, body: bytes = b"\0") -> RequestFrame:
    frame = request_frame(32, version, correlation_id, body, "app")
    header = parse_request_header(memoryview(frame)[4:])
    entry = InFlight().add(header.api_key, header.api_version, header.correlation_id, False)
    return RequestFrame(header, frame, entry)


def test_forward_as_it_came_sends_the_clients_frame() -> None:
    ctx, request = Recorded(), held_back()
    carry_out(ctx, request, AS_IT_CAME)  # type: ignore[arg-type]
    assert ctx.actions == [("forward", request.frame, request.request)]


def test_forward_a_changed_frame_keeps_the_requests_place() -> None:
    ctx, request = Recorded(), held_back()
    changed = request_frame(32, 3, 41, b"\1\2", "app")
    carry_out(ctx, request, Forward(changed))  # type: ignore[arg-type]
    assert ctx.actions == [("forward", changed, request.request)]


@pytest.mark.parametrize(("version", "correlation_id"), [(2, 41), (3, 40)])
def test_a_changed_frame_that_would_not_match_its_answer_is_refused(
    version: int, correlation_id: int
) -> None:
    ctx, request = Recorded(), held_back()
    other = request_frame(32, version, correlation_id, b"\1", "app")
    with pytest.raises(ValueError, match="must keep"):
        carry_out(ctx, request, Forward(other))  # type: ignore[arg-type]
    assert ctx.actions == []


def test_forward_unanswered_sends_it_and_the_client_awaits_nothing() -> None:
    ctx, request = Recorded(), held_back()
    other = request_frame(0, 3, 41, b"\0", "app")
    carry_out(ctx, request, Forward(other, answered=False))  # type: ignore[arg-type]
    carry_out(ctx, request, Forward(answered=False))  # type: ignore[arg-type]
    assert ctx.actions == [
        ("unanswered", other, request.request),
        ("unanswered", request.frame, request.request),
    ]


def test_answer_answers_in_the_requests_turn() -> None:
    ctx, request = Recorded(), held_back()
    carry_out(ctx, request, Answer(b"\0\0\0\x29answer"))  # type: ignore[arg-type]
    assert ctx.actions == [("answer", b"\0\0\0\x29answer", request.request)]


def test_close_with_a_reason_is_a_violation_and_without_one_a_plain_close() -> None:
    ctx, request = Recorded(), held_back()
    carry_out(ctx, request, Close("malformed_request", "cut short"))  # type: ignore[arg-type]
    carry_out(ctx, request, Close())  # type: ignore[arg-type]
    assert ctx.actions == [("violation", "client", "malformed_request", "cut short"), ("close",)]


def test_ask_upstream_sends_the_gateways_request_and_its_answer_decides() -> None:
    ctx, request = Recorded(), held_back()
    seen: list[bytes] = []

    def then(payload: memoryview) -> RequestVerdict:
        seen.append(bytes(payload))
        return Answer(b"made of " + bytes(payload))

    ask = AskUpstream(3, lambda cid: (12, request_frame(3, 12, cid, b"", None)), then)
    carry_out(ctx, request, ask)  # type: ignore[arg-type]
    assert ctx.actions == [("ask", 3, 12, request_frame(3, 12, -7, b"", None))]
    (handler,) = ctx.handlers
    handler(memoryview(b"metadata"))
    assert seen == [b"metadata"]
    assert ctx.actions[1:] == [("answer", b"made of metadata", request.request)]


def test_an_upstream_answer_the_hook_cannot_read_closes_the_connection() -> None:
    ctx, request = Recorded(), held_back()

    def then(payload: memoryview) -> RequestVerdict:
        raise ValueError("not a Metadata response")

    carry_out(ctx, request, AskUpstream(3, lambda cid: (12, b"x"), then))  # type: ignore[arg-type]
    ctx.handlers[0](memoryview(b"garbage"))
    assert ctx.actions[1:] == [
        ("rewrite_failed", "ValueError('not a Metadata response')"),
        ("close",),
    ]


def test_later_carries_out_the_verdict_its_work_returns() -> None:
    ctx, request = Recorded(), held_back()

    async def from_zookeeper() -> RequestVerdict:
        await asyncio.sleep(0)
        return Answer(b"written")

    carry_out(ctx, request, Later(from_zookeeper()))  # type: ignore[arg-type]
    assert ctx.actions == []  # nothing until the work is done
    (task,) = ctx.tasks
    asyncio.run(task)
    assert ctx.actions == [("answer", b"written", request.request)]


def test_later_sends_nothing_to_a_connection_closed_meanwhile() -> None:
    ctx, request = Recorded(), held_back()

    async def slow() -> RequestVerdict:
        ctx.closed = True  # the client went away while ZooKeeper answered
        return Answer(b"written")

    carry_out(ctx, request, Later(slow()))  # type: ignore[arg-type]
    asyncio.run(ctx.tasks[0])
    assert ctx.actions == []


def test_later_work_that_fails_closes_the_connection_not_the_loop() -> None:
    ctx, request = Recorded(), held_back()

    async def broken() -> RequestVerdict:
        raise RuntimeError("bug")

    carry_out(ctx, request, Later(broken()))  # type: ignore[arg-type]
    asyncio.run(ctx.tasks[0])
    assert ctx.actions == [("close",)]


def test_anything_else_is_a_bug_named_as_such() -> None:
    with pytest.raises(TypeError, match="not a verdict"):
        carry_out(Recorded(), held_back(), None)  # type: ignore[arg-type]


# -- responses ---------------------------------------------------------------------------
# SaslAuthenticate's filter with its response hook swapped: observed, so no address
# rewrite runs before the hook and the verdict alone decides what the client gets.
def _with_response_hook(monkeypatch: pytest.MonkeyPatch, hook: Any) -> Recorded:
    declared = registry.FILTERS[SASL_AUTHENTICATE]
    monkeypatch.setitem(
        registry.FILTERS, SASL_AUTHENTICATE, dataclasses.replace(declared, on_response=hook)
    )
    return Recorded()


def _response(body: bytes) -> ResponseFrame:
    entry = InFlight().add(SASL_AUTHENTICATE, 2, 9, False)
    payload = b"\0\0\0\x09\0" + body  # correlation id 9, no header tags (header v1)
    return ResponseFrame(entry, len(payload).to_bytes(4, "big") + payload)


def test_a_response_forwarded_as_it_came_is_the_same_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = _with_response_hook(monkeypatch, lambda ctx, entry, body: AS_IT_CAME)
    response = _response(b"body")
    assert dispatch.rewrite_frame(ctx, response) is response.frame  # type: ignore[arg-type]


def test_a_response_forwarded_changed_gets_the_new_body_after_its_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bytes] = []

    def hook(ctx: Any, entry: Any, body: memoryview) -> Forward:
        seen.append(bytes(body))
        return Forward(b"longer body")

    ctx = _with_response_hook(monkeypatch, hook)
    out = dispatch.rewrite_frame(ctx, _response(b"body"))  # type: ignore[arg-type]
    assert seen == [b"body"]
    assert out == (16).to_bytes(4, "big") + b"\0\0\0\x09\0longer body"


def test_a_response_hook_may_close_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    closing = Close("malformed_frame", "the broker said so")
    ctx = _with_response_hook(monkeypatch, lambda ctx, entry, body: closing)
    assert dispatch.rewrite_frame(ctx, _response(b"body")) is closing  # type: ignore[arg-type]


def test_a_response_hook_that_returns_no_verdict_costs_only_its_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = _with_response_hook(monkeypatch, lambda ctx, entry, body: None)
    response = _response(b"body")
    assert dispatch.rewrite_frame(ctx, response) is response.frame  # type: ignore[arg-type]
    assert ctx.actions == [("rewrite_failed", "TypeError")]


def test_a_close_reason_is_one_of_the_metrics_bounded_labels() -> None:
    with pytest.raises(ValueError, match="is not one of"):
        Close("because I said so")
