"""Requests held back that no filter answers: ``reject`` them as Kafka would.

A key or version a connection may not use (outside its negotiated ranges, an API key
the gateway does not know, a version a feature level withholds) gets
UNSUPPORTED_VERSION in the request's own schema, or a close where Kafka closes (a
request it cannot parse).

Every refusal is counted under its reason, real API key and version and the client's
software (or client-id identity) (``Metrics.refused``), goes into the client's identity
record (/clients), and is logged, rate-limited, with the client id and peer.
"""

from __future__ import annotations

from ..features.catalogue import required_level
from ..observability.logging import RateLimitedLogger
from ..protocol import RequestFrame, api_spec, has_schema
from .context import Exchange
from .filter import Answer, Close
from .unsupported import unsupported_version_response

# Lines about bad input, which a client can trigger once per frame (named as the
# connection's lines were).
limited = RateLimitedLogger("gateway.proxy")


def reject(ctx: Exchange, request: RequestFrame, body: memoryview) -> Answer | Close:
    """A key or version this connection may not use: UNSUPPORTED_VERSION in the
    request's own schema, or a close where Kafka closes (a request it cannot parse);
    counted and logged here."""
    header = request.header
    assert ctx.ranges is not None
    metrics = ctx.gateway.metrics
    allowed = ctx.ranges.get(header.api_key)
    spec = api_spec(header.api_key)
    reason = "unknown_api_key" if spec is None else "unsupported_version"
    gated = gated_by(ctx, header.api_key, header.api_version)
    if gated is not None:
        reason = "gated_by_feature"
    metrics.refused(reason, ctx.listener, ctx.info, header.api_key, header.api_version)
    if spec is None:
        # unknown_api_keys = "close"; a client that uses a vendor key does so on
        # every connection, so the line below is rate-limited per key.
        metrics.unknown_api_keys.labels("close").inc()
    payload = None
    if spec is not None and has_schema(header.api_key, header.api_version):
        payload = unsupported_version_response(header, body)
    limited.warning(
        "request.rejected",
        # Per API key, version and reason: one client that keeps hitting a refusal does not
        # hide another's (the rest are counted in ``suppressed``).
        limit_key=(header.api_key, header.api_version, reason),
        reason=reason,
        api_key=header.api_key,
        api=spec.name if spec else None,
        version=header.api_version,
        advertised=allowed,
        correlation_id=header.correlation_id,
        action="error_response" if payload else "close",
        **({"needs_feature": f"{gated[0]}>={gated[1]}"} if gated else {}),
        listener=ctx.listener,
        client_labels=ctx.info.labels if ctx.info is not None else None,
        **ctx.who(),
    )
    if payload is None:
        # Kafka closes on a request it cannot parse; so does the gateway.
        return Close()
    return Answer(payload)


def gated_by(ctx: Exchange, api_key: int, version: int) -> tuple[str, int] | None:
    """(feature, level) when only an unfinalized feature level withholds this version."""
    features = ctx.gateway.features
    cap = features.caps_for(ctx.upstream_features).get(api_key)
    if cap is None or version <= cap:
        return None
    own = ctx.gateway.own_range(api_key)
    theirs = ctx.upstream_ranges.get(api_key)
    if own is None or theirs is None:
        return None
    if not max(own[0], theirs[0]) <= version <= min(own[1], theirs[1]):
        return None
    return required_level(features.catalogue, api_key, version)
