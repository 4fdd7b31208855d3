"""UpdateFeatures (key 57) written to ZooKeeper, as ZooKeeper-mode Kafka's controller does.

The one write a gateway makes to the finalized levels on a client's behalf: read the
``feature`` znode, validate the updates against it and against what every registered
gateway supports (``gateway.features.validation``), write the result compare-and-set on
the epoch read (``FeatureStore.write``), and answer once this gateway serves the new
epoch, as Kafka answers once its controller has applied the record.

Apart from ``FeatureGate`` because it needs only the store and the epoch the gate
serves: the gate learns the new levels through its watch like every other gateway, not
from here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from kazoo.exceptions import KazooException

from ..features.store import EpochConflict, FeatureStore
from ..features.validation import (
    FEATURE_UPDATE_FAILED,
    FeatureUpdate,
    UpdateResult,
    validate_updates,
)
from ..observability.logging import get_logger

log = get_logger("gateway.features")


async def apply_updates(
    store: FeatureStore | None,
    served_epoch: Callable[[], int],
    updates: Sequence[FeatureUpdate],
    *,
    validate_only: bool,
    all_or_nothing: bool,
    who: dict[str, object],
    timeout_s: float = 30.0,
) -> tuple[list[UpdateResult], int, str | None]:
    """Validate and write ``updates``; ``store`` None: gating is not connected.

    Returns (per-feature results, top-level error, message). ``all_or_nothing``
    (UpdateFeatures v2) writes nothing unless every update is valid; v0/v1 apply the
    valid ones. A write waits (up to ``timeout_s``) until ``served_epoch()`` reaches the
    epoch it wrote.
    """
    loop = asyncio.get_running_loop()
    if store is None:
        return [], FEATURE_UPDATE_FAILED, "feature gating is not connected to ZooKeeper"

    def work() -> tuple[list[UpdateResult], tuple[int, int] | None]:
        finalized = store.read()
        validation = validate_updates(finalized.levels, store.supported_by_gateway(), updates)
        results = list(validation.results)
        target = validation.all_or_nothing if all_or_nothing else validation.target
        if validate_only or target is None or target == dict(finalized.levels):
            return results, None
        try:
            epoch = store.write(target, finalized.epoch, old=finalized.levels, who=who)
        except EpochConflict as exc:
            return [
                r if not r.ok else UpdateResult(r.feature, FEATURE_UPDATE_FAILED, str(exc))
                for r in results
            ], None
        return results, (finalized.epoch, epoch)

    try:
        results, change = await loop.run_in_executor(None, work)
    except KazooException as exc:
        message = f"ZooKeeper is unavailable: {exc!r}"
        failed = [UpdateResult(u.feature, FEATURE_UPDATE_FAILED, message) for u in updates]
        return failed, 0 if not all_or_nothing else FEATURE_UPDATE_FAILED, message
    log.info(
        "features.update_features_request",
        updates=[f"{u.feature}={u.level}/{int(u.upgrade_type)}" for u in updates],
        validate_only=validate_only,
        errors={r.feature: r.message for r in results if not r.ok},
        epoch=f"{change[0]} -> {change[1]}" if change else None,
        **who,
    )
    if change is not None:
        deadline = loop.time() + timeout_s
        while served_epoch() < change[1] and loop.time() < deadline:
            await asyncio.sleep(0.005)
    return results, 0, None
