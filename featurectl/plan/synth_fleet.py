"""The synthetic fleet's story (``featurectl.plan.synth``): its clients, what each uses
and when, what is refused, and what the gateways support and finalize. Data and two pure
functions; ``synth`` turns it into scrapes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from gateway.features.catalogue import load_catalogue

START = datetime(2025, 1, 6, tzinfo=UTC)
LISTENERS = ("plain", "tls")
FINALIZED = {"group.version": 1, "transaction.version": 1}
LATENCY_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
REJECT_REASONS = ("oversize_frame", "unknown_api_key", "unsupported_version", "gated_by_feature")
# (client name, version, api_key, api_version, reason, refusals per second, present from)
REFUSED: tuple[tuple[str, str, int, int, str, float, float], ...] = (
    ("kafka-python", "1.4.7", 0, 2, "unsupported_version", 0.4, 0.0),
    ("apache-kafka-streams", "4.1.0", 88, 0, "gated_by_feature", 0.2, 0.5),
)

# (api_key, version, requests per second per connection)
Usage = tuple[int, int, float]
_COMMON_CONSUMER: tuple[Usage, ...] = (
    (18, 3, 0.01),  # ApiVersions
    (3, 12, 0.05),  # Metadata
    (10, 4, 0.01),  # FindCoordinator
    (8, 8, 0.2),  # OffsetCommit
    (9, 8, 0.02),  # OffsetFetch
    (2, 7, 0.01),  # ListOffsets
)


@dataclass(frozen=True)
class ClientProfile:
    name: str
    version: str
    # Connections per gateway at full presence.
    connections: int
    usage: tuple[Usage, ...]
    # Fraction of the window during which the client is present (start, end).
    present: tuple[float, float] = (0.0, 1.0)
    # (api_key, version, until): that usage stops at this fraction of the window.
    stops: tuple[tuple[int, int, float], ...] = ()


CLIENTS: tuple[ClientProfile, ...] = (
    ClientProfile(
        "librdkafka",
        "2.6.1",
        12,
        (*_COMMON_CONSUMER, (0, 11, 8.0), (1, 16, 4.0), (68, 0, 0.5), (22, 5, 0.01)),
        present=(0.33, 1.0),
    ),
    ClientProfile(
        "librdkafka",
        "2.3.0",
        12,
        (*_COMMON_CONSUMER, (0, 9, 8.0), (1, 13, 4.0), (11, 9, 0.01), (12, 4, 0.3), (14, 5, 0.01)),
        present=(0.0, 0.66),
    ),
    ClientProfile(
        "apache-kafka-java",
        "4.0.0",
        6,
        (
            *_COMMON_CONSUMER,
            (0, 11, 12.0),
            (1, 17, 6.0),
            (68, 1, 0.4),
            (69, 0, 0.01),
            (60, 1, 0.01),
        ),
    ),
    ClientProfile(
        "apache-kafka-java",
        "3.7.0",
        5,
        (
            *_COMMON_CONSUMER,
            (0, 10, 6.0),
            (1, 15, 3.0),
            (11, 9, 0.01),
            (12, 4, 0.3),
            (14, 5, 0.01),
            (69, 0, 0.05),
            (22, 4, 0.01),
            (24, 4, 0.05),
            (26, 4, 0.05),
        ),
        stops=((69, 0, 0.1),),
    ),
    ClientProfile(
        "confluent-kafka-python",
        "2.5.0",
        4,
        (*_COMMON_CONSUMER, (0, 11, 2.0), (1, 16, 1.0), (11, 9, 0.01), (12, 4, 0.3)),
    ),
    ClientProfile(
        "franz-go", "1.17.1", 3, (*_COMMON_CONSUMER, (0, 11, 5.0), (1, 16, 3.0), (12, 4, 0.3))
    ),
    ClientProfile(
        "sarama", "1.43.0", 3, (*_COMMON_CONSUMER, (0, 7, 3.0), (1, 11, 2.0), (12, 3, 0.3))
    ),
    ClientProfile(
        "kafka-python", "2.0.2", 2, ((18, 2, 0.01), (3, 8, 0.05), (0, 7, 1.0), (1, 10, 1.0))
    ),
    ClientProfile("unknown", "unknown", 2, ((18, 0, 0.01), (3, 1, 0.05), (0, 3, 0.5))),
)


def client_id(c: ClientProfile) -> str:
    return f"{c.name}/{c.version}"


def support(old: bool) -> dict[str, tuple[int, int]]:
    """A gateway in front of a Kafka 4.x broker supports every catalogue level; an
    ``old`` one fronts an older broker."""
    levels = {name: (0, f.max_level) for name, f in load_catalogue().items()}
    if old:
        # An older broker: no Produce v12 (transaction.version 2), no share groups.
        levels["transaction.version"] = (0, 1)
        levels["share.version"] = (0, 0)
    return levels


def activity(client: ClientProfile, fraction: float) -> float:
    """0..1: how much of the client's fleet is connected at this point of the window."""
    start, end = client.present
    ramp = 0.05
    if fraction < start or fraction > end:
        return 0.0
    if start > 0 and fraction < start + ramp:
        return (fraction - start) / ramp
    if end < 1 and fraction > end - ramp:
        return (end - fraction) / ramp
    return 1.0
