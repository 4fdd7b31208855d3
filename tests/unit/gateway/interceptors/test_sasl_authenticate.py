"""SaslAuthenticate, observed (gateway.interceptors.apis.sasl_authenticate): the request
goes upstream as it came whatever its bytes, and the login learns only what reads.

The connection is a stand-in (``Exchange``'s few fields the hooks read): the behaviour
on real sockets against Kafka is tests/integration/test_sasl_principals.py's."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from gateway.interceptors import dispatch
from gateway.protocol import (
    InFlight,
    InFlightRequest,
    RequestFrame,
    ResponseFrame,
    parse_request_header,
)
from gateway.protocol._sasl_login import AUTHENTICATED, FAILED, SaslLogin
from tests.unit._kafka import build, kio_request, kio_response, schema_module, top_level

SECRET = b"alice-secret"


class Exchange(SimpleNamespace):
    """The connection as the hooks and ``dispatch.on_request`` see it."""

    def forward(self, request: RequestFrame) -> None:
        request.request.to_upstream = True
        self.upstream.append(request.frame)

    def who(self) -> dict[str, object]:
        return {"peer": "127.0.0.1:1"}


def exchange(login: SaslLogin | None) -> Any:
    return Exchange(sasl_login=login, ranges={36: (0, 2)}, info=None, upstream=[])


def held_back(frame: bytes) -> RequestFrame:
    header = parse_request_header(memoryview(frame)[4:])
    entry = InFlight().add(header.api_key, header.api_version, header.correlation_id, False)
    return RequestFrame(header, frame, entry)


def response(version: int, error_code: int, token: bytes = b"") -> bytes:
    cls = top_level(schema_module("sasl_authenticate", version, "response"))
    built = build(cls, error_code=ErrorCode(error_code), auth_bytes=token)
    return kio_response(7, built).frame


def answered(ctx: Any, entry: InFlightRequest, response: bytes) -> None:
    """The broker's answer through the response path: shown, passed on as it came."""
    assert dispatch.rewrite_frame(ctx, ResponseFrame(entry, response)) is response


@pytest.mark.parametrize("version", [0, 1, 2])
def test_the_request_goes_upstream_as_it_came_and_the_answer_settles_the_login(
    version: int,
) -> None:
    login = SaslLogin()
    login.begin("PLAIN", 1)
    ctx = exchange(login)
    frame = kio_request("sasl_authenticate", version, 7, auth_bytes=b"\0alice\0" + SECRET).frame
    request = held_back(frame)
    dispatch.on_request(ctx, request)
    assert ctx.upstream == [frame] and request.request.to_upstream
    entry = request.request
    answered(ctx, entry, response(version, 0))
    assert (login.outcome, login.name) == (AUTHENTICATED, "alice")


def test_garbage_goes_upstream_too_and_names_nobody() -> None:
    login = SaslLogin()
    login.begin("PLAIN", 1)
    ctx = exchange(login)
    # A SaslAuthenticate v1 whose auth_bytes length runs past the frame.
    frame = kio_request("sasl_authenticate", 1, 7, auth_bytes=b"\0alice\0" + SECRET).frame
    body_at = len(frame) - len(b"\0alice\0" + SECRET) - 4
    garbled = frame[:body_at] + b"\x7f\xff\xff\xff" + frame[body_at + 4 :]
    request = held_back(garbled)
    dispatch.on_request(ctx, request)
    assert ctx.upstream == [garbled]
    answered(ctx, request.request, b"\0\0\0\5\0\0\0\7\0")  # cut
    assert (login.outcome, login.name) == (FAILED, None)


def test_an_observer_that_fails_costs_nothing_but_its_observation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(ctx: Any, request: RequestFrame, body: memoryview) -> None:
        raise UnicodeDecodeError("utf-8", SECRET, 0, 1, "planted")

    observed = dataclasses.replace(dispatch.registry.REQUESTS[36], on_request=broken)
    monkeypatch.setitem(dispatch.registry.REQUESTS, 36, observed)
    ctx = exchange(None)
    frame = kio_request("sasl_authenticate", 2, 7, auth_bytes=b"\0alice\0" + SECRET).frame
    dispatch.on_request(ctx, held_back(frame))
    assert ctx.upstream == [frame]
    logged = capsys.readouterr()
    assert "request.observer_failed" in logged.out + logged.err
    assert SECRET.decode() not in logged.out + logged.err


def test_without_a_handshake_there_is_no_login_to_tell() -> None:
    ctx = exchange(None)
    frame = kio_request("sasl_authenticate", 2, 7, auth_bytes=b"\0alice\0" + SECRET).frame
    request = held_back(frame)
    dispatch.on_request(ctx, request)
    answered(ctx, request.request, response(2, 0))
    assert ctx.upstream == [frame]
