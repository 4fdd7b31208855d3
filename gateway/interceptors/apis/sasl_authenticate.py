"""SaslAuthenticate: observed, never changed. With SaslHandshake v1 the SASL tokens
travel in these requests and responses; the connection's login
(``gateway.protocol._sasl_login``, begun by the SaslHandshake the request reader saw)
reads who logs in from the client's first token and learns from each response whether
the broker accepted the round. Both frames pass exactly as they came, at every version
the upstream offers (they are not decoded with the codec, so not capped to it).
"""

from __future__ import annotations

from ...protocol import (
    SASL_AUTHENTICATE,
    InFlightRequest,
    Malformed,
    RequestFrame,
    api_spec,
    authenticate_result,
    authenticate_token,
    response_body_offset,
)
from ..context import Exchange
from ..filter import Filter

# What an answer that cannot be read counts as: a refusal (no principal from it).
UNREADABLE = -1


def sees_request(ctx: Exchange, request: RequestFrame, body: memoryview) -> None:
    login = ctx.sasl_login
    if login is None:  # no SaslHandshake before it: the broker refuses it
        return
    try:
        token = authenticate_token(request.header.api_version, body)
    except Malformed:
        login.client_token(None)
        return
    login.client_token(token)


def sees_response(ctx: Exchange, entry: InFlightRequest, payload: memoryview) -> None:
    login = ctx.sasl_login
    if login is None:
        return
    spec = api_spec(SASL_AUTHENTICATE)
    assert spec is not None
    try:
        offset = response_body_offset(payload, spec.response_header_version(entry.api_version))
        error_code, size = authenticate_result(entry.api_version, payload[offset:])
    except Malformed:
        error_code, size = UNREADABLE, 0
    login.server_token(error_code, size)


FILTER = Filter(SASL_AUTHENTICATE, sees_request=sees_request, sees_response=sees_response)
