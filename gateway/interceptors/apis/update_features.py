"""UpdateFeatures, answered by the gateway while feature gating is on: the finalized
levels live in the gateways' ZooKeeper, not in the broker's, so the gateway authorizes
the change and writes it there, for every version it supports whatever the upstream
offers. A feature the upstream broker finalizes itself (metadata.version), or an upgrade
above the broker's own level, is refused with a message that says what to change where
(``cluster_refusal``).

The bytes are ``gateway.interceptors.update_features``'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...features.validation import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    FeatureUpdate,
    UpdateResult,
)
from ...observability.logging import RateLimitedLogger
from ...principal import ANONYMOUS
from ...protocol import UPDATE_FEATURES, RequestFrame
from ...versions import VersionRange
from ..context import Exchange, GatewayView
from ..filter import Answer, Filter, Later
from ..update_features import parse_update_features, update_features_response

# Lines about bad input, which a client can trigger once per frame (named as the
# connection's lines were).
limited = RateLimitedLogger("gateway.proxy")


def update_features(ctx: Exchange, request: RequestFrame, body: memoryview) -> Answer | Later:
    header = request.header
    gw = ctx.gateway
    try:
        parsed = parse_update_features(header.api_version, body)
    except ValueError as exc:
        limited.warning("request.update_features_malformed", error=str(exc), **ctx.who())
        payload = update_features_response(
            header, [], error_code=INVALID_REQUEST, error_message=str(exc)
        )
        return Answer(payload)
    refusal = update_features_refusal(ctx)
    if refusal is not None:
        gw.metrics.refused(
            "unauthorized", ctx.listener, ctx.info, header.api_key, header.api_version
        )
        message = f"UpdateFeatures through kafka-gateway is refused: {refusal}; use featurectl"
        limited.warning(
            "request.update_features_refused",
            updates=[f"{u.feature}={u.level}" for u in parsed.updates],
            why=refusal,
            **{**ctx.who(), "principal": ctx.principal or ANONYMOUS},
        )
        results = [
            UpdateResult(u.feature, CLUSTER_AUTHORIZATION_FAILED, message) for u in parsed.updates
        ]
        payload = update_features_response(
            header, results, error_code=CLUSTER_AUTHORIZATION_FAILED, error_message=message
        )
        return Answer(payload)
    message = cluster_refusal(ctx, parsed.updates)
    if message is not None:
        limited.info("request.update_features_cluster_refused", why=message, **ctx.who())
        results = [UpdateResult(u.feature, INVALID_REQUEST, message) for u in parsed.updates]
        payload = update_features_response(
            header, results, error_code=INVALID_REQUEST, error_message=message
        )
        return Answer(payload)

    async def run() -> Answer:
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
        payload = update_features_response(
            header, results, error_code=error_code, error_message=message
        )
        return Answer(payload)

    return Later(run())


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


def features_gated(gw: GatewayView, upstream: dict[int, VersionRange]) -> bool:
    return gw.features.enabled


FILTER = Filter(
    UPDATE_FEATURES,
    on_request=update_features,
    requests_when=features_gated,
    replaces_upstream=True,
)
