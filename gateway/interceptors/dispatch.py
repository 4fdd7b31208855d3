"""The runtime facade of the filter registry: what the connection asks of interceptors.

The connection (``gateway.server.proxy``) knows no API by name. Each intercepted API
declares what the gateway does with it once, as a ``Filter`` in its own module of
``gateway.interceptors.apis`` (Kroxylicious' model); ``gateway.interceptors.registry``
collects them and derives the tables this module applies:

* which keys this connection's requests must not forward (``held_back``): it leaves
  them, and versions outside the negotiated ranges, out of its pass-through table, so
  a forwarded request costs one dict lookup by key and nothing else;
* what becomes of a request the table held back (``on_request``): the verdict of the
  hook of the filter of its key (``Filter.on_request``), carried out by ``verdicts``; a
  version no hook takes goes to the bridge (``bridging``) or is rejected as Kafka would
  (``reject``: UNSUPPORTED_VERSION, or a close);
* how to rewrite a response whose key asked for it (``intercepts_response``,
  ``stream_policy`` and ``rewrite_frame``/``rewrite_head``/``rewrite_tail``): broker
  addresses (``addresses``, by the filter's mode), then the verdict of the filter's
  response hook (``Filter.on_response``);
* what the compiled lane may forward, walk or head-replace itself (``REWRITTEN_FROM``,
  ``lane_walks``, ``lane_heads``, ``LAST_HEADS``).

Each hook is a plain function of an ``Exchange`` (``gateway.interceptors.context``) that
returns a verdict (``gateway.interceptors.filter``); the byte-level work stays in the
sans-I/O module of its API. To intercept another API: one new module in
``gateway.interceptors.apis``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from functools import cache

from ..features.report import FeatureReport
from ..kafka_client import UPSTREAM_API_VERSIONS
from ..observability.logging import RateLimitedLogger, get_logger
from ..protocol import (
    API_VERSIONS,
    HeadFinder,
    InFlightRequest,
    Malformed,
    RequestFrame,
    ResponseFrame,
    ResponseHead,
    ResponseTail,
    TailFinder,
    api_name,
    api_range,
    api_spec,
    codec_version,
    frame,
    request_schema,
    response_body_offset,
    response_schema,
    tail_program,
)
from ..versions import ApiVersionsError, VersionRange, parse_upstream_api_versions
from . import addresses, registry
from . import bridging as bridge
from . import upstream as internal
from .context import Exchange, GatewayView
from .filter import AS_IT_CAME, Close, Forward, RequestHook, RequestVerdict
from .reject import reject
from .verdicts import carry_out

# The connection's logger names: these lines were the connection's and keep their name.
log = get_logger("gateway.proxy")
# Lines about bad input, which a client can trigger once per frame.
limited = RateLimitedLogger("gateway.proxy")


@cache
def codec_limits() -> dict[int, VersionRange]:
    """The versions of each API the gateway decodes that its codec (kio) handles:
    ``negotiate``'s limits. Every other API passes through at every version.

    A rewritten API is limited from its first rewritten version on (Produce below v10
    passes, untouched); an answered one from its first. Only the response codec counts
    for an API whose requests are not decoded: one only rewritten, and ApiVersions,
    which answers every version and reads its request itself.
    """
    limits: dict[int, VersionRange] = {}
    for api_key, first in registry.DECODED.items():
        versions = api_range(api_key)
        if versions is None:
            continue
        declared = registry.REQUESTS.get(api_key)
        reads_requests = declared is not None and not declared.any_version
        low, high = versions
        top = max(first, low) - 1
        for version in range(max(first, low), high + 1):
            if codec_version(api_key, version, "response") is None or (
                reads_requests and codec_version(api_key, version, "request") is None
            ):
                break
            top = version
        if top >= low:
            limits[api_key] = (low, top)
    return limits


@cache  # once per process (see below)
def warm_up() -> None:
    """Import now the schemas of every API an interceptor decodes, all versions both ways.

    Imported at a connection's first such frame instead, they held the event loop while
    every other connection waited: ~35 ms for the first Metadata response (against
    0.7 ms warm). The fork server calls this once for all workers (``worker_preload``).
    Once is enough: a worker forked after it must not walk the schemas again, which
    would write to (and so copy) ~1 MB of pages it shares with the other workers.
    """
    for api_key, (low, high) in codec_limits().items():
        for version in range(max(registry.DECODED[api_key], low), high + 1):
            request = codec_version(api_key, version, "request")
            if request is not None:
                request_schema(api_key, request)
            response_schema(api_key, codec_version(api_key, version, "response"))
            if api_key in registry.TAIL_REWRITTEN:
                # lane_walks' programs: made in a worker, they walked (and so copied)
                # the pages of the schemas, 0.25 MB a worker
                # (docs/memory.md#workers-share-the-fork-servers-pages).
                tail_program(api_key, version)


def held_back(gw: GatewayView, upstream: dict[int, VersionRange]) -> list[int]:
    """API keys whose requests a connection to an upstream with these ranges hands to
    the interceptors (``on_request``) instead of forwarding them after one lookup."""
    return [key for key, hooked in registry.REQUESTS.items() if hooked.requests_when(gw, upstream)]


def served_for_upstream(gw: GatewayView, upstream: dict[int, VersionRange]) -> list[int]:
    """API keys the gateway serves whatever the upstream's versions (see ``replaces_upstream``)."""
    return [
        key
        for key, hooked in registry.REQUESTS.items()
        if hooked.replaces_upstream and hooked.requests_when(gw, upstream)
    ]


def on_request(ctx: Exchange, request: RequestFrame) -> None:
    """A request the connection's pass-through table held back: its filter's hook
    decides what becomes of it; at a version none takes, the bridge or a rejection."""
    header = request.header
    body = memoryview(request.frame)[4 + header.body_offset :]
    if ctx.info is not None and header.client_id is not None:
        ctx.info.client_id = header.client_id
    assert ctx.ranges is not None
    hooked = registry.REQUESTS.get(header.api_key)
    if hooked is not None:
        assert hooked.on_request is not None  # the registry's REQUESTS all have one
        allowed = ctx.ranges.get(header.api_key)
        if hooked.any_version or (
            allowed is not None and allowed[0] <= header.api_version <= allowed[1]
        ):
            if hooked.observes:
                verdict = _observe(ctx, hooked.on_request, request, body)
            else:
                verdict = hooked.on_request(ctx, request, body)
            carry_out(ctx, request, verdict)
            return
    # A version the upstream removed (KIP-896) for a client the policy lets through;
    # else refused as Kafka would.
    verdict = bridge.carry(ctx, request, body) or reject(ctx, request, body)
    carry_out(ctx, request, verdict)


def _observe(
    ctx: Exchange, hook: RequestHook, request: RequestFrame, body: memoryview
) -> RequestVerdict:
    """An observed request's verdict; a hook that fails lets it pass as it came."""
    try:
        return hook(ctx, request, body)
    except Exception as exc:  # a bug must not cost the client its request
        # The type only: the message of an error about a token may quote it.
        limited.error(
            "request.observer_failed",
            api=api_name(request.header.api_key),
            error=type(exc).__name__,
            **ctx.who(),
        )
        return AS_IT_CAME


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


# -- the gateway's own ApiVersions request upstream ----------------------------------------
def ask_upstream_versions(
    ctx: Exchange,
    negotiated: Callable[[dict[int, VersionRange], FeatureReport], None],
    versions: tuple[int, ...] = UPSTREAM_API_VERSIONS,
) -> None:
    """Learn the upstream's ranges and features on the connection's own behalf (each of
    ``versions`` in turn while the broker refuses them) and hand them to ``negotiated``;
    close if the broker answers none."""

    def on_versions(payload: memoryview) -> None:
        try:
            ranges, features = parse_upstream_api_versions(payload[4:], version)
        except ApiVersionsError as exc:
            if len(versions) > 1:
                ask_upstream_versions(ctx, negotiated, versions[1:])
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
        negotiated(ranges, features)

    # The answer cannot come before this returns: on_versions reads ``version`` then.
    build = functools.partial(internal.api_versions_request, version=versions[0])
    version = ctx.ask_upstream(API_VERSIONS, build, on_versions)


# -- responses rewritten ------------------------------------------------------------------
# api key → the first version whose response is rewritten: intercepts_response's rule,
# which the compiled lane's table of plain requests follows (gateway/server/_lane.pyx).
REWRITTEN_FROM = registry.REWRITTEN_FROM


def _rewritten_forwarded(
    passthrough: Mapping[int, VersionRange], api_keys: tuple[int, ...]
) -> dict[int, VersionRange]:
    """api key → (min, max) of the forwarded versions of ``api_keys`` whose responses
    are rewritten."""
    ranges: dict[int, VersionRange] = {}
    for api_key in api_keys:
        forwarded = passthrough.get(api_key)
        if forwarded is not None:
            ranges[api_key] = (max(forwarded[0], REWRITTEN_FROM[api_key]), forwarded[1])
    return ranges


def lane_walks(passthrough: Mapping[int, VersionRange]) -> dict[tuple[int, int], tuple[int, ...]]:
    """(api key, version) → ``tail_program`` for each forwarded version whose response is
    rewritten only when its top-level tagged section holds something (Produce v10+,
    Fetch v16+: KIP-951's NodeEndpoints, sent only when a leader moved). The compiled
    lane walks those responses and forwards the ones whose section is empty itself, as
    ``addresses.rewrite_response`` would (unchanged); the rest go to ``rewrite_frame``."""
    walked = _rewritten_forwarded(passthrough, registry.TAIL_REWRITTEN)
    return {
        (api_key, version): tail_program(api_key, version)
        for api_key, (low, high) in walked.items()
        for version in range(low, high + 1)
    }


def lane_heads(passthrough: Mapping[int, VersionRange]) -> dict[int, VersionRange]:
    """api key → the forwarded versions whose responses are rewritten in their head
    only (Metadata: its brokers array). The compiled lane replaces a head it finds in
    ``LAST_HEADS`` itself, as ``rewrite_head`` would; the rest go to ``rewrite_head``."""
    return _rewritten_forwarded(passthrough, registry.HEAD_REWRITTEN)


# The heads the lane may replace itself (see ``lane_heads``).
LAST_HEADS = addresses.LAST_HEADS


def intercepts_response(
    entry: InFlightRequest, _first: Callable[[int, int], int] = registry.RESPONSES_FROM.get
) -> bool:
    """The ``ResponseReader``'s policy: runs once per response, one dict lookup by key
    (``RESPONSES_FROM``: rewritten or observed). The gateway's own requests (``context``
    set) go to their handler."""
    return entry.context is not None or entry.api_version >= _first(entry.api_key, 1 << 15)


def stream_policy(entry: InFlightRequest, size: int) -> TailFinder | HeadFinder | None:
    """Runs once per intercepted response (see ``TailPolicy``). The gateway's own
    requests are gathered whole for their handler."""
    if entry.context is not None:
        return None
    streams_from = registry.STREAMED_TAILS.get(entry.api_key)
    if streams_from is not None and size >= streams_from:
        return TailFinder(entry.api_key, entry.api_version)
    return addresses.head_finder(entry.api_key, entry.api_version)


def rewrite_frame(ctx: Exchange, response: ResponseFrame) -> bytes | bytearray | Close:
    """The client's copy of a whole intercepted response (the frame itself if unchanged),
    or ``Close`` where a response hook closes the connection."""
    entry = response.request
    payload = memoryview(response.frame)[4:]
    hooked = registry.FILTERS[entry.api_key]  # only declared keys are intercepted
    spec = api_spec(entry.api_key)
    assert spec is not None
    try:
        try:
            offset = response_body_offset(payload, spec.response_header_version(entry.api_version))
        except Malformed:
            if not hooked.observes:
                raise
            # An observer still learns that an answer came (one it cannot read).
            offset = len(payload)
        original = payload[offset:]
        body: bytes | memoryview = original
        if not hooked.observes:
            body = addresses.rewrite_response(
                entry.api_key, entry.api_version, original, ctx.gateway.router
            )
        if hooked.on_response is not None:
            match hooked.on_response(ctx, entry, memoryview(body)):
                case Close() as closing:
                    return closing
                case Forward(data=data) if data is not None:
                    body = data
                case Forward():
                    pass
                case other:
                    raise TypeError(f"a response hook returned {other!r}, not a verdict")
        if body is original:
            return response.frame  # unchanged: no copy of a possibly large fetch
    except Exception as exc:  # a broker bug must not cost the client its response
        # An observer's: the type only, as in ``_observe``.
        ctx.rewrite_failed(entry, type(exc).__name__ if hooked.observes else repr(exc))
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
