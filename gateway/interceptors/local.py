"""Requests the gateway answers itself: the hooks that ``dispatch.REQUESTS`` registers by
API key, and ``reject`` for keys and versions a connection may not use.

Each hook gets the connection as an ``Exchange`` and answers through it (``answer``, in
the request's turn), possibly after asking the upstream (``ask_upstream``) or the
feature gate; the bytes are built by the sans-I/O module of its API.

* ApiVersions: from the negotiated ranges, with the feature levels and KIP-885 tags;
  learns the client's software (KIP-511).
* UpdateFeatures: with feature gating on, finalized levels live in the gateways'
  ZooKeeper, so the gateway authorizes the change and writes it there.
  A feature the upstream broker finalizes itself (metadata.version), or an upgrade
  above the broker's own level, is refused with a message that says what to change
  where (``cluster_refusal``).
* DescribeCluster (KIP-700 for any backend): built from a Metadata request sent
  upstream on the gateway's own behalf, with KIP-885 software tags per broker.
* Anything else held back: UNSUPPORTED_VERSION in the request's own schema, or a close
  where Kafka closes.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..features.catalogue import required_level
from ..features.validation import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    FeatureUpdate,
    UpdateResult,
)
from ..observability.logging import RateLimitedLogger, get_logger
from ..principal import ANONYMOUS
from ..protocol import DESCRIBE_CLUSTER, METADATA, RequestFrame, api_spec, response_body_offset
from ..protocol._apis import has_schema
from . import upstream as internal
from .api_versions import add_broker_software, answer_api_versions
from .context import Exchange
from .describe_cluster import add_software_per_broker
from .unsupported import unsupported_version_response
from .update_features import parse_update_features, update_features_response

# The connection's logger names: these lines were the connection's and keep their name.
log = get_logger("gateway.proxy")
# Lines about bad input, which a client (or a broker) can trigger once per frame.
limited = RateLimitedLogger("gateway.proxy")


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


def answer_api_versions_request(ctx: Exchange, request: RequestFrame, body: memoryview) -> None:
    header = request.header
    assert ctx.ranges is not None
    gw = ctx.gateway
    report = ctx.feature_report
    feature_fields = {
        "supported_features": report.supported,
        "finalized_features": report.finalized,
        "finalized_epoch": report.epoch,
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
        old = ctx.info.labels
        gw.registry.set_software(ctx.info.connection_id, *answer.client_software)
        ctx.info.labels = gw.metrics.software_labels(*answer.client_software)
        gw.metrics.client_identified(ctx.listener, old, ctx.info.labels)
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


def update_features(ctx: Exchange, request: RequestFrame, body: memoryview) -> None:
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
    message = cluster_refusal(ctx, parsed.updates)
    if message is not None:
        limited.info("request.update_features_cluster_refused", why=message, **ctx.who())
        results = [UpdateResult(u.feature, INVALID_REQUEST, message) for u in parsed.updates]
        payload = update_features_response(
            header, results, error_code=INVALID_REQUEST, error_message=message
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


def cluster_refusal(ctx: Exchange, updates: Sequence[FeatureUpdate]) -> str | None:
    """Why the Kafka cluster behind the gateway rules these updates out, or None.

    * A feature the broker finalizes itself and the catalogue does not gate
      (metadata.version): the gateways have no level of it to change.
    * An upgrade the gateways could serve above the level the broker finalized: clients
      get the lower of the two levels, so the tool would report "upgraded to N" while
      describe shows less; the brokers go first. (A level the gateways cannot serve gets
      the usual validation's refusal, which names the gateways.)

    A request naming one is refused whole rather than split: a tool that asked for two
    changes at once would otherwise see one of them done behind its refusal."""
    catalogue = ctx.gateway.features.catalogue
    upstream = ctx.upstream_features
    owned = sorted(
        {
            u.feature
            for u in updates
            if u.feature not in catalogue and u.feature in upstream.supported
        }
    )
    if owned:
        return (
            f"{', '.join(owned)} {'is' if len(owned) == 1 else 'are'} finalized by the Kafka "
            "cluster behind kafka-gateway, not by the gateways: change it on the brokers "
            "(kafka-features.sh --bootstrap-server BROKER); nothing was changed"
        )
    supported = ctx.gateway.features.supported or {}
    ahead = [
        u
        for u in updates
        if u.level >= 1
        and not u.allows_downgrade
        and upstream.knows(u.feature)
        and upstream.finalized.get(u.feature, 0) < u.level <= supported.get(u.feature, (0, 0))[1]
    ]
    if ahead:
        wanted = " ".join(f"--feature {u.feature}={u.level}" for u in ahead)
        have = ", ".join(f"{u.feature} {upstream.finalized.get(u.feature, 0)}" for u in ahead)
        return (
            f"the Kafka cluster behind kafka-gateway has finalized {have}: clients get the "
            "lower of its level and the gateways', so upgrade the brokers first "
            f"(kafka-features.sh --bootstrap-server BROKER upgrade {wanted}), then the "
            "gateways; nothing was changed"
        )
    return None


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


def synthesize_describe_cluster(ctx: Exchange, request: RequestFrame, body: memoryview) -> None:
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
    return payload[:offset] + describe_cluster_software(ctx, version, payload[offset:])


def describe_cluster_software(ctx: Exchange, version: int, body: bytes) -> bytes:
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
