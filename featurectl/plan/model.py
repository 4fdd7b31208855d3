"""What the planner's parts hand each other: its inputs, the results collected from
Spark, and the usage error any part may raise (no Spark, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.features.store import DEFAULT_CHROOT

if TYPE_CHECKING:
    from gateway.features.catalogue import Catalogue

DEFAULT_OUT = "plan"


class UsageError(Exception):
    """Bad arguments; the message says what to change."""


@dataclass(frozen=True)
class PlanInputs:
    metrics: str
    catalogue: Catalogue
    targets: Mapping[str, int]
    zookeeper: str | None = None
    # The --catalogue file as given (None: the built-in one), for the plan's own commands.
    catalogue_path: str | None = None
    chroot: str = DEFAULT_CHROOT
    out: Path = Path(DEFAULT_OUT)
    since: datetime | None = None
    until: datetime | None = None
    # --release: Kafka releases to plan the brokers' upgrade to (readiness.readiness).
    releases: tuple[str, ...] = ()


@dataclass
class PlanData:
    """Everything the report needs, collected to the driver (small by construction)."""

    dataset: dict[str, Any]
    state: dict[str, Any]
    features: list[dict[str, Any]]
    verdicts: list[dict[str, Any]]
    blockers: list[dict[str, Any]]
    clients: list[dict[str, Any]]
    usage: list[dict[str, Any]]
    connections_series: list[dict[str, Any]]
    gated_series: list[dict[str, Any]]
    timings: dict[str, float] = field(default_factory=dict)
    # Refused requests per reason, API version and client (tally.refusal_usage), and
    # what they mean (clients.classify_refusals): no feature level fixes them, or one does.
    refusals: list[dict[str, Any]] = field(default_factory=list)
    broken_now: list[dict[str, Any]] = field(default_factory=list)
    wanting: list[dict[str, Any]] = field(default_factory=list)
    # ApiVersions refused as too new and retried lower: negotiation, not breakage
    # (clients.negotiated); said in a note, never counted as broken.
    negotiated: list[dict[str, Any]] = field(default_factory=list)
    # Per client software: the API versions it used (clients.versions_by_client).
    versions_by_client: list[dict[str, Any]] = field(default_factory=list)
    # How many client records (readers.read_clients) the plan had: 0 means the client
    # ids and addresses are unknown (the metric labels name only the software).
    identities: int = 0
    # Per --release: who breaks on it, gateways, features, steps (readiness.readiness).
    releases: list[dict[str, Any]] = field(default_factory=list)


__all__ = ["DEFAULT_OUT", "PlanData", "PlanInputs", "UsageError"]
