"""The live state a plan is made against: live gateways, what each supports, and the
finalized levels, from the best source there is.

ZooKeeper (``--zookeeper``) first, else the dataset's newest state snapshot, else the
gateways' own feature gauges in the samples (collected with the plan's second pass).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import ConnectionLoss

from featurectl.plan.layout import StateSnapshot, epoch_ms
from featurectl.plan.model import PlanInputs, UsageError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class LiveState:
    """Live gateways, their support and the finalized levels, from the best source."""

    doc: dict[str, Any]  # what plan.json says about the state
    gateway_ids: list[str]
    # (gateway_id, feature, min_level, max_level) per live gateway and feature it lists
    support: list[tuple[str, str, int | None, int | None]]
    finalized: dict[str, int]  # feature -> level, levels >= 1 only


def snapshot_state(spark: SparkSession, inputs: PlanInputs, root: str) -> LiveState | None:
    """The state from ZooKeeper (``--zookeeper``), else the dataset's newest snapshot."""
    from featurectl.plan import readers

    if inputs.zookeeper:
        snapshot, source = _read_zookeeper(inputs.zookeeper, inputs.chroot), "zookeeper"
    else:
        snapshot, source = readers.read_latest_state(spark, root), "snapshot"
    if snapshot is None:
        return None
    registrations = snapshot.registrations
    gateway_ids = [r.gateway_id for r in registrations]
    doc = {
        "source": source,
        "time_ms": snapshot.time_ms,
        "zookeeper": inputs.zookeeper or snapshot.zookeeper,
        "chroot": snapshot.chroot or inputs.chroot,
        "catalogue": inputs.catalogue_path,
        "epoch": snapshot.finalized.epoch,
        "finalized": dict(snapshot.finalized.levels),
        "gateway_ids": gateway_ids,
        "registrations": [
            {
                "gateway_id": r.gateway_id,
                "listener": r.listener,
                "upstream": r.upstream,
                "gateway_version": r.gateway_version,
                "broker_software": f"{r.broker_software_name} {r.broker_software_version}",
                "metrics_url": r.metrics_url,
            }
            for r in registrations
        ],
    }
    support = [
        (reg.gateway_id, name, low, high)
        for reg in registrations
        for name, (low, high) in sorted(reg.features.items())
    ]
    finalized = {k: v for k, v in snapshot.finalized.levels.items() if v >= 1}
    return LiveState(doc, gateway_ids, support, finalized)


def metrics_state_frames(samples: DataFrame, spans: DataFrame) -> list[DataFrame]:
    """Neither ZooKeeper nor a snapshot: the gateways' gauges are the best evidence left.
    Support, finalized levels and the newest epoch, collected with the second pass."""
    from pyspark.sql import functions as F

    from featurectl.plan import transforms as tx

    return [
        tx.support_from_metrics(samples, spans),
        tx.finalized_from_metrics(samples),
        tx.latest_per_gateway(samples, spans, tx.FINALIZED_EPOCH).agg(
            F.max("value").alias("epoch")
        ),
    ]


def metrics_state(
    inputs: PlanInputs,
    support_rows: Sequence[Mapping[str, Any]],
    finalized_rows: Sequence[Mapping[str, Any]],
    epoch_rows: Sequence[Mapping[str, Any]],
) -> LiveState:
    support = [
        (r["gateway_id"], r["feature"], r["min_level"], r["max_level"]) for r in support_rows
    ]
    finalized = {r["feature"]: r["level"] for r in finalized_rows}
    gateway_ids = sorted({gateway_id for gateway_id, *_ in support})
    epoch = epoch_rows[0]["epoch"] if epoch_rows and epoch_rows[0]["epoch"] is not None else -1
    doc = {
        "source": "metrics",
        "time_ms": None,
        "zookeeper": None,
        "chroot": inputs.chroot,
        "catalogue": inputs.catalogue_path,
        "epoch": int(epoch),
        "finalized": finalized,
        "gateway_ids": gateway_ids,
        "registrations": [],
    }
    return LiveState(doc, gateway_ids, support, finalized)


class Registry:
    """A started FeatureStore (one ZooKeeper session): a plan's one read, or a whole
    ``featurectl collect`` run's snapshots."""

    def __init__(self, connect: str, chroot: str, timeout_s: float) -> None:
        from gateway.features.store import FeatureStore, make_client

        self.connect = connect
        self.chroot = chroot
        self.client = make_client(connect, timeout_s=timeout_s)
        self.client.start(timeout=timeout_s)
        self.store = FeatureStore(self.client, chroot)

    def snapshot(self) -> StateSnapshot:
        """Finalized levels and registrations now; ConnectionLoss while disconnected.

        Without the check, a read issued while kazoo reconnects waits for the
        connection to come back, and the round (and its scrapes) with it.
        """
        if not self.client.connected:
            raise ConnectionLoss(f"not connected to {self.connect}")
        return StateSnapshot(
            time_ms=epoch_ms(datetime.now(UTC)),
            finalized=self.store.read(),
            registrations=tuple(self.store.registrations()),
            zookeeper=self.connect,
            chroot=self.store.paths.chroot,
        )

    def close(self) -> None:
        self.client.stop()
        self.client.close()


def _read_zookeeper(connect: str, chroot: str) -> StateSnapshot:
    try:
        registry = Registry(connect, chroot, timeout_s=10.0)
    except Exception as exc:  # kazoo's timeout types differ per handler; ValueError
        raise UsageError(
            f"cannot connect to ZooKeeper {connect}: {exc or type(exc).__name__}; "
            "check --zookeeper, or drop it to use the dataset's state snapshot"
        ) from None
    try:
        return registry.snapshot()
    finally:
        registry.close()


__all__ = ["LiveState", "Registry", "metrics_state", "metrics_state_frames", "snapshot_state"]
