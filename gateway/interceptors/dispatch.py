"""Interceptors by API key (Kroxylicious' filter model): what the gateway does itself.

The connection (``gateway.server.proxy``) knows no API by name. It asks this module
three things and applies the answer:

* which keys this connection's requests must not forward (``answered_here``): it
  leaves them, and versions outside the negotiated ranges, out of its pass-through
  table, so a forwarded request costs one dict lookup by key and nothing else;
* what to do with a request the table held back (``on_request``): an interceptor
  registered for its key answers it locally (``REQUESTS``); anything else is rejected
  as Kafka would (``reject``: UNSUPPORTED_VERSION, or a close);
* how to rewrite a response whose key asked for it (``intercepts_response``,
  ``stream_policy`` and ``rewrite_frame``/``rewrite_head``/``rewrite_tail``): broker
  addresses (``addresses``) and, for DescribeCluster, the KIP-885 software tags
  (``RESPONSE_EXTRAS``).

Each hook is a plain function of an ``Exchange`` (``gateway.interceptors.context``); the
byte-level work stays in the sans-I/O module of its API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..features.catalogue import required_level
from ..features.validation import CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, UpdateResult
from ..observability.logging import RateLimitedLogger, get_logger
from ..principal import ANONYMOUS
from ..protocol import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    FETCH,
    METADATA,
    UPDATE_FEATURES,
    HeadFinder,
    InFlightRequest,
    RequestFrame,
    ResponseFrame,
    ResponseHead,
    ResponseTail,
    TailFinder,
    api_spec,
    frame,
    response_body_offset,
)
from ..protocol._apis import api_name, has_schema
from ..versions import ApiVersionsError, VersionRange, parse_api_versions_response
from . import addresses
from . import upstream as internal
from .api_versions import add_broker_software, answer_api_versions
from .context import Exchange, GatewayView
from .describe_cluster import add_software_per_broker
from .unsupported import unsupported_version_response
from .update_features import parse_update_features, update_features_response

# The connection's logger names: these lines were the connection's and keep their name.
log = get_logger("gateway.proxy")
# Lines about bad input, which a client (or a broker) can trigger once per frame.
limited = RateLimitedLogger("gateway.proxy")

# Fetch responses from this size on stream through; only their tagged section (where
# KIP-951's NodeEndpoints are) is held back, so a bulk consumer does not wait for the
# gateway to gather each response before the first byte reaches it. Smaller ones are
# gathered whole, which leaves a rewrite free to change their length.
STREAM_FETCH_FROM_BYTES = 64 * 1024

# Handles a request the gateway answers itself: (connection, request, request body).
RequestHook = Callable[[Exchange, RequestFrame, memoryview], None]


@dataclass(frozen=True, slots=True)
class RequestInterceptor:
    hook: RequestHook
    # Whether this gateway answers the key itself on a connection to an upstream with
    # these ranges (otherwise the key is forwarded like any other).
    applies: Callable[[GatewayView, dict[int, VersionRange]], bool]
    # Every version reaches ``hook`` (ApiVersions answers versions it lacks itself, as
    # KIP-511 asks); otherwise only negotiated versions do and the rest are rejected.
    any_version: bool = False
    # The upstream does not limit the versions: the gateway serves the API for it.
    replaces_upstream: bool = False


# -- requests answered locally ---------------------------------------------------------
def misreads_tagged_fields(name: str, version: str) -> bool:
    """Clients whose parsers break on extra tagged fields in ApiVersions responses."""
    if name != "librdkafka":
        return False
    parts = version.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return False
    return (major, minor) < (2, 1)


def _api_versions(ctx: Exchange, request: RequestFrame, body: memoryview) -> None:
    header = request.header
    assert ctx.ranges is not None
    gw = ctx.gateway
    features = gw.features
    feature_fields = {
        "supported_features": features.supported or {},
        "finalized_features": features.finalized.levels,
        "finalized_epoch": features.finalized.epoch,
    }
    answer = answer_api_versions(
        header,
        body,
        ctx.ranges,
        broker_software=gw.broker_software(ctx.upstream_address),
        software_tags=gw.software_tags,
        **feature_fields,
    )
    if answer.client_software is not None and misreads_tagged_fields(*answer.client_software):
        # librdkafka before 2.1 skips one byte too few per tagged field: two KIP-885
        # tags throw its ApiVersions parser off (seen with Debian 12's kcat, 2.0.2).
        answer = answer_api_versions(
            header, body, ctx.ranges, broker_software=None, **feature_fields
        )
    if answer.client_software is not None and ctx.info is not None:
        # Counts so far belong to the old labels; then move the connection over.
        ctx.fold_stats()
        old = ctx.info.software
        gw.registry.set_software(ctx.info.connection_id, *answer.client_software)
        gw.metrics.client_identified(ctx.listener, old, ctx.info.software)
        log.info(
            "connection.identified",
            listener=ctx.listener,
            **ctx.who(),
            **({"tls_subject": ctx.tls_subject} if ctx.tls_subject else {}),
        )
    elif answer.error_code == 42:
        gw.metrics.rejected.labels("invalid_client_software").inc()
        limited.info("request.invalid_client_software", version=header.api_version, **ctx.who())
    elif answer.error_code == 35:
        gw.metrics.rejected.labels("unsupported_version").inc()
    ctx.answer(request.request, answer.payload)


def _update_features(ctx: Exchange, request: RequestFrame, body: memoryview) -> None:
    header = request.header
    entry = request.request
    gw = ctx.gateway
    try:
        parsed = parse_update_features(header.api_version, body)
    except ValueError as exc:
        limited.warning("request.update_features_malformed", error=str(exc), **ctx.who())
        payload = update_features_response(
            header, [], error_code=INVALID_REQUEST, error_message=str(exc)
        )
        ctx.answer(entry, payload)
        return
    refusal = update_features_refusal(ctx)
    if refusal is not None:
        gw.metrics.rejected.labels("unauthorized").inc()
        message = f"UpdateFeatures through kafka-gateway is refused: {refusal}; use featurectl"
        limited.warning(
            "request.update_features_refused",
            updates=[f"{u.feature}={u.level}" for u in parsed.updates],
            principal=ctx.principal or ANONYMOUS,
            why=refusal,
            **ctx.who(),
        )
        results = [
            UpdateResult(u.feature, CLUSTER_AUTHORIZATION_FAILED, message) for u in parsed.updates
        ]
        payload = update_features_response(
            header, results, error_code=CLUSTER_AUTHORIZATION_FAILED, error_message=message
        )
        ctx.answer(entry, payload)
        return

    async def run() -> None:
        results, error_code, message = await gw.features.apply_updates(
            parsed.updates,
            validate_only=parsed.validate_only,
            all_or_nothing=header.api_version >= 2,
            who={
                **ctx.who(),
                "principal": ctx.principal or ANONYMOUS,
                "address": ctx.peer,
                "via": "UpdateFeatures",
            },
        )
        if not ctx.closed:
            payload = update_features_response(
                header, results, error_code=error_code, error_message=message
            )
            ctx.answer(entry, payload)

    ctx.spawn(run())


def update_features_refusal(ctx: Exchange) -> str | None:
    """Why this connection may not change finalized features, or None if it may.

    Like a Kafka ACL (ALTER on CLUSTER for a principal from a host): with both
    features.update_allowed_principals and update_allowed_from set, both must match.
    """
    cfg = ctx.gateway.config
    principals = cfg.features_update_allowed_principals
    if not principals and not cfg.features_update_allowed_from:
        return "no principal or address is allowed (features.update_allowed_*)"
    if principals and ctx.principal not in principals:
        return (
            f"principal {ctx.principal or ANONYMOUS} is not in features.update_allowed_principals"
        )
    if cfg.features_update_allowed_from and not ctx.gateway.update_features_allowed(ctx.peer):
        return "client address is not in features.update_allowed_from"
    return None


def _synthesize_describe_cluster(ctx: Exchange, request: RequestFrame, body: memoryview) -> None:
    """KIP-700 for any backend: DescribeCluster answered from a Metadata request the
    gateway sends upstream on its own behalf."""
    header = request.header
    entry = request.request
    metadata_max = ctx.upstream_ranges.get(METADATA, (0, -1))[1]
    version = min(metadata_max, 12)
    if version < 1:
        ctx.violation(
            "upstream",
            "malformed_frame",
            "upstream offers no Metadata version to build DescribeCluster",
        )
        return
    try:
        asked = internal.parse_describe_cluster_request(header.api_version, bytes(body))
    except ValueError as exc:
        # Kafka closes a connection whose request it cannot parse (found by fuzzing:
        # the error used to escape from the broker's answer to our Metadata request).
        ctx.violation("client", "malformed_request", str(exc))
        return

    def on_metadata(payload: memoryview) -> None:
        spec = api_spec(METADATA)
        assert spec is not None
        try:
            offset = response_body_offset(payload, spec.response_header_version(version))
            answer = internal.describe_cluster_from_metadata(
                header, asked, version, payload[offset:], ctx.gateway.router
            )
        except Exception as exc:  # a broker's Metadata answer we cannot read
            ctx.rewrite_failed(entry, repr(exc))
            ctx.close()
            return
        ctx.answer(entry, _with_software(ctx, header.api_version, answer))

    ctx.ask_upstream(
        METADATA, lambda cid: (version, internal.metadata_request(cid, version)), on_metadata
    )


def _with_software(ctx: Exchange, version: int, payload: bytes) -> bytes:
    """KIP-885 tags for a DescribeCluster response payload the gateway built."""
    spec = api_spec(DESCRIBE_CLUSTER)
    assert spec is not None
    offset = response_body_offset(payload, spec.response_header_version(version))
    return payload[:offset] + _describe_cluster_software(ctx, version, payload[offset:])


def _describe_cluster_software(ctx: Exchange, version: int, body: bytes) -> bytes:
    """BrokerSoftwareName/Version per broker entry and for the answering broker."""
    gw = ctx.gateway
    body = add_software_per_broker(version, body, gw.broker_software_of, gw.software_tags)
    return add_broker_software(
        DESCRIBE_CLUSTER,
        version,
        body,
        gw.broker_software(ctx.upstream_address),
        gw.software_tags,
    )


REQUESTS: dict[int, RequestInterceptor] = {
    API_VERSIONS: RequestInterceptor(_api_versions, lambda gw, up: True, any_version=True),
    UPDATE_FEATURES: RequestInterceptor(
        # The finalized levels live in the gateways' ZooKeeper, not in the broker's.
        _update_features,
        lambda gw, up: gw.features.enabled,
        replaces_upstream=True,
    ),
    DESCRIBE_CLUSTER: RequestInterceptor(
        _synthesize_describe_cluster,
        lambda gw, up: gw.synthesizes_describe_cluster(up),
        replaces_upstream=True,
    ),
}


def answered_here(gw: GatewayView, upstream: dict[int, VersionRange]) -> list[int]:
    """API keys a connection to an upstream with these ranges never forwards."""
    return [key for key, interceptor in REQUESTS.items() if interceptor.applies(gw, upstream)]


def served_for_upstream(gw: GatewayView, upstream: dict[int, VersionRange]) -> list[int]:
    """API keys the gateway serves whatever the upstream's versions (see ``replaces_upstream``)."""
    return [
        key
        for key, interceptor in REQUESTS.items()
        if interceptor.replaces_upstream and interceptor.applies(gw, upstream)
    ]


def on_request(ctx: Exchange, request: RequestFrame) -> None:
    """A request the connection's pass-through table held back: answer it locally."""
    header = request.header
    body = memoryview(request.frame)[4 + header.body_offset :]
    if ctx.info is not None and header.client_id is not None:
        ctx.info.client_id = header.client_id
    assert ctx.ranges is not None
    interceptor = REQUESTS.get(header.api_key)
    if interceptor is not None:
        allowed = ctx.ranges.get(header.api_key)
        if interceptor.any_version or (
            allowed is not None and allowed[0] <= header.api_version <= allowed[1]
        ):
            interceptor.hook(ctx, request, body)
            return
    reject(ctx, request, body)


# -- requests outside what this connection may use -------------------------------------
def forwards_unknown(ctx: Exchange, api_key: int, api_version: int) -> bool:
    """unknown_api_keys = "forward": an API key the gateway does not know (a vendor's)
    passes through opaque. Only its key, version and correlation id were read, which
    is all any header version shares; the response, matched by correlation id in
    request order, goes back untouched (no interceptor knows the key)."""
    gw = ctx.gateway
    if gw.config.unknown_api_keys != "forward" or api_spec(api_key) is not None:
        return False
    gw.metrics.unknown_api_keys.labels("forward").inc()
    limited.info(
        "request.unknown_api_key_forwarded",
        limit_key=api_key,
        api_key=api_key,
        version=api_version,
        **ctx.who(),
    )
    return True


def reject(ctx: Exchange, request: RequestFrame, body: memoryview) -> None:
    """A key or version this connection may not use: UNSUPPORTED_VERSION in the
    request's own schema, or a close where Kafka closes (a request it cannot parse)."""
    header = request.header
    assert ctx.ranges is not None
    metrics = ctx.gateway.metrics
    allowed = ctx.ranges.get(header.api_key)
    spec = api_spec(header.api_key)
    reason = "unknown_api_key" if spec is None else "unsupported_version"
    gated = gated_by(ctx, header.api_key, header.api_version)
    if gated is not None:
        reason = "gated_by_feature"
    metrics.rejected.labels(reason).inc()
    if spec is None:
        # unknown_api_keys = "close"; a client that uses a vendor key does so on
        # every connection, so the line below is rate-limited per key.
        metrics.unknown_api_keys.labels("close").inc()
    payload = None
    if spec is not None and has_schema(header.api_key, header.api_version):
        payload = unsupported_version_response(header, body)
    limited.warning(
        "request.rejected",
        limit_key=header.api_key if spec is None else None,
        reason=reason,
        api_key=header.api_key,
        api=spec.name if spec else None,
        version=header.api_version,
        advertised=allowed,
        correlation_id=header.correlation_id,
        action="error_response" if payload else "close",
        **({"needs_feature": f"{gated[0]}>={gated[1]}"} if gated else {}),
        **ctx.who(),
    )
    if payload is None:
        # Kafka closes on a request it cannot parse; so does the gateway.
        ctx.close()
        return
    ctx.answer(request.request, payload)


def gated_by(ctx: Exchange, api_key: int, version: int) -> tuple[str, int] | None:
    """(feature, level) when only an unfinalized feature level withholds this version."""
    features = ctx.gateway.features
    cap = features.caps.get(api_key)
    if cap is None or version <= cap:
        return None
    own = ctx.gateway.own_range(api_key)
    theirs = ctx.upstream_ranges.get(api_key)
    if own is None or theirs is None:
        return None
    if not max(own[0], theirs[0]) <= version <= min(own[1], theirs[1]):
        return None
    return required_level(features.catalogue, api_key, version)


# -- the gateway's own ApiVersions request upstream ----------------------------------------
def ask_upstream_versions(
    ctx: Exchange,
    negotiated: Callable[[dict[int, VersionRange]], None],
    build: Callable[[int], tuple[int, bytes]] = internal.api_versions_request,
) -> None:
    """Learn the upstream's ranges on the connection's own behalf (the latest version,
    then v0 if the broker refuses it) and hand them to ``negotiated``; close if the
    broker answers neither."""

    def on_versions(payload: memoryview) -> None:
        try:
            ranges = parse_api_versions_response(payload[4:], version)
        except ApiVersionsError as exc:
            if version > 0:
                ask_upstream_versions(ctx, negotiated, internal.api_versions_v0_request)
                return
            log.error(
                "upstream.api_versions_failed",
                error_code=exc.error_code,
                upstream=str(ctx.upstream_address),
            )
            ctx.close()
            return
        except ValueError as exc:
            log.error(
                "upstream.api_versions_unreadable",
                error=str(exc),
                upstream=str(ctx.upstream_address),
            )
            ctx.close()
            return
        negotiated(ranges)

    # The answer cannot come before this returns: on_versions reads ``version`` then.
    version = ctx.ask_upstream(API_VERSIONS, build, on_versions)


# -- responses rewritten ------------------------------------------------------------------
def intercepts_response(
    entry: InFlightRequest, _first: Callable[[int, int], int] = addresses.REWRITTEN_RESPONSES.get
) -> bool:
    """The ``ResponseReader``'s policy: runs once per response, one dict lookup by key (see
    ``addresses.needs_rewrite``). The gateway's own requests (``context`` set) go to their
    handler."""
    return entry.context is not None or entry.api_version >= _first(entry.api_key, 1 << 15)


def stream_policy(entry: InFlightRequest, size: int) -> TailFinder | HeadFinder | None:
    """Runs once per intercepted response (see ``TailPolicy``). The gateway's own
    requests are gathered whole for their handler."""
    if entry.context is not None:
        return None
    if entry.api_key == FETCH and size >= STREAM_FETCH_FROM_BYTES:
        return TailFinder(FETCH, entry.api_version)
    return addresses.head_finder(entry.api_key, entry.api_version)


# After the address rewrite of a whole response body: (connection, version, body) → body.
RESPONSE_EXTRAS: dict[int, Callable[[Exchange, int, bytes], bytes]] = {
    DESCRIBE_CLUSTER: _describe_cluster_software,
}


def rewrite_frame(ctx: Exchange, response: ResponseFrame) -> bytes | bytearray:
    """The client's copy of a whole intercepted response (the frame itself if unchanged)."""
    entry = response.request
    spec = api_spec(entry.api_key)
    assert spec is not None  # only known keys are intercepted
    payload = memoryview(response.frame)[4:]
    try:
        offset = response_body_offset(payload, spec.response_header_version(entry.api_version))
        original = payload[offset:]
        body = addresses.rewrite_response(
            entry.api_key, entry.api_version, original, ctx.gateway.router
        )
        extra = RESPONSE_EXTRAS.get(entry.api_key)
        if extra is not None:
            body = extra(ctx, entry.api_version, bytes(body))
        elif body is original:
            return response.frame  # unchanged: no copy of a possibly large fetch
    except Exception as exc:  # a broker bug must not cost the client its response
        ctx.rewrite_failed(entry, repr(exc))
        return response.frame
    return frame(bytes(payload[:offset]) + body)


def rewrite_head(ctx: Exchange, item: ResponseHead) -> bytes:
    """The client's copy of a held-back response head (see ``ResponseHead``)."""
    entry = item.request
    try:
        return addresses.rewrite_head(
            entry.api_key, entry.api_version, item.head, ctx.gateway.router
        )
    except Exception as exc:  # as in rewrite_frame: the client still gets its response
        ctx.rewrite_failed(entry, repr(exc))
        return item.head


def rewrite_tail(ctx: Exchange, item: ResponseTail) -> bytes:
    """The client's copy of a streamed response's tagged section, of the same length."""
    entry = item.request
    try:
        result = addresses.rewrite_tail(
            entry.api_key, entry.api_version, item.tail, ctx.gateway.router, keep_length=True
        )
    except Exception as exc:  # as in rewrite_frame: the client still gets its response
        ctx.rewrite_failed(entry, repr(exc))
        return item.tail
    if result.dropped_endpoints:
        # Not logged: one leader change can touch every fetch of every client.
        ctx.gateway.metrics.node_endpoints_dropped.labels(api_name(entry.api_key)).inc()
    return result.tail
