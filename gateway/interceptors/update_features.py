"""UpdateFeatures (key 57) answered by the gateway (sans-I/O: decode and encode only).

With feature gating on, finalized levels live in the gateways' ZooKeeper, not in the
broker's, so an admin client's UpdateFeatures (``kafka-features.sh upgrade`` or
``Admin.updateFeatures``) arriving through a gateway is answered by the gateway, after
the same validation ``featurectl`` uses (``features.validation``). The server layer
does the authorization and the ZooKeeper write; this module turns bytes into
``FeatureUpdate``s and results back into a response:

* v0: ``AllowDowngrade`` maps to a safe downgrade; per-feature results.
* v1: ``UpgradeType`` and ``ValidateOnly``; per-feature results.
* v2 (KIP-1022): no per-feature results; the request is all or nothing and the first
  failure is the top-level error.
"""

from __future__ import annotations

import datetime
import importlib
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from ..features.validation import FeatureUpdate, UpdateResult, UpgradeType
from ..protocol import (
    UPDATE_FEATURES,
    RequestHeader,
    api_spec,
    decode_request,
    encode_response,
    response_header,
    response_schema,
)

FIRST_ALL_OR_NOTHING_VERSION = 2


@dataclass(frozen=True, slots=True)
class UpdateFeaturesRequest:
    updates: tuple[FeatureUpdate, ...]
    validate_only: bool
    timeout_ms: int


def parse_update_features(version: int, body: bytes | memoryview) -> UpdateFeaturesRequest:
    """Decode a request body; raises ValueError when it does not decode."""
    try:
        request = decode_request(UPDATE_FEATURES, version, body)
    except Exception as exc:  # kio raises assorted errors on malformed bodies
        raise ValueError(f"UpdateFeatures v{version} body does not decode: {exc!r}") from None
    if request.feature_updates is None:  # a null array where Kafka's schema has none
        raise ValueError(f"UpdateFeatures v{version}: FeatureUpdates is null")
    updates = []
    for item in request.feature_updates:
        if version == 0:
            kind = UpgradeType.SAFE_DOWNGRADE if item.allow_downgrade else UpgradeType.UPGRADE
        else:
            kind = int(item.upgrade_type)
        updates.append(FeatureUpdate(item.feature, int(item.max_version_level), kind))
    timeout = request.timeout
    timeout_ms = int(timeout.total_seconds() * 1000) if timeout is not None else 60000
    return UpdateFeaturesRequest(
        tuple(updates), bool(getattr(request, "validate_only", False)), timeout_ms
    )


def update_features_response(
    header: RequestHeader,
    results: Sequence[UpdateResult],
    *,
    error_code: int = 0,
    error_message: str | None = None,
) -> bytes:
    """The response payload (header + body). ``error_code`` is the top-level error; for
    v2 the first failed result becomes it when none is given."""
    version = header.api_version
    schema = response_schema(UPDATE_FEATURES, version)
    module = importlib.import_module(schema.__module__)
    if version >= FIRST_ALL_OR_NOTHING_VERSION and error_code == 0:
        failed = next((r for r in results if not r.ok), None)
        if failed is not None:
            error_code, error_message = failed.error_code, failed.message
            if len(results) > 1:
                # v2 has no per-feature results: a client shows this one message against
                # every feature it asked for, so it names the one that failed (Kafka's
                # words, from its QuorumController).
                error_message = (
                    "The update failed for all features since the following feature had "
                    f"an error: {failed.feature}: {failed.message}"
                )
    kwargs = {
        "throttle_time": i32Timedelta.parse(datetime.timedelta(0)),
        "error_code": ErrorCode(error_code),
        "error_message": error_message,
    }
    if version < FIRST_ALL_OR_NOTHING_VERSION:
        kwargs["results"] = tuple(
            module.UpdatableFeatureResult(
                feature=r.feature, error_code=ErrorCode(r.error_code), error_message=r.message
            )
            for r in results
        )
    spec = api_spec(UPDATE_FEATURES)
    assert spec is not None
    head = response_header(header.correlation_id, spec.response_header_version(version))
    return head + encode_response(schema(**kwargs))


__all__ = ["UpdateFeaturesRequest", "parse_update_features", "update_features_response"]
