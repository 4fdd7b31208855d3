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
    authenticate_result,
    authenticate_token,
)
from ..context import Exchange
from ..filter import AS_IT_CAME, Filter, Forward

# What an answer that cannot be read counts as: a refusal (no principal from it).
UNREADABLE = -1


def sees_request(ctx: Exchange, request: RequestFrame, body: memoryview) -> Forward:
    login = ctx.sasl_login
    if login is None:  # no SaslHandshake before it: the broker refuses it
        return AS_IT_CAME
    try:
        token = authenticate_token(request.header.api_version, body)
    except Malformed:
        token = None
    login.client_token(token)
    return AS_IT_CAME


def sees_response(ctx: Exchange, entry: InFlightRequest, body: memoryview) -> Forward:
    login = ctx.sasl_login
    if login is None:
        return AS_IT_CAME
    try:
        error_code, size = authenticate_result(entry.api_version, body)
    except Malformed:
        error_code, size = UNREADABLE, 0
    login.server_token(error_code, size)
    return AS_IT_CAME


FILTER = Filter(
    SASL_AUTHENTICATE, on_request=sees_request, on_response=sees_response, observes=True
)
