"""Limits on what clients may hold: Kafka's names and defaults where Kafka has the setting.

The top level of the TOML file.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol import DEFAULT_MAX_FRAME_BYTES
from ._declare import at_least, between, parsed_by, setting

# Kafka's default for its connection caps and rate: Int.MaxValue, i.e. none.
UNLIMITED = 2**31 - 1
_NO_LIMIT = "no limit (Kafka's Int.MaxValue)"


def parse_ip_overrides(text: str) -> dict[str, int]:
    """Kafka's max.connections.per.ip.overrides: "host:count,..." (IPv6 hosts: [::1]:5)."""
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.isdigit():
            raise ValueError(f"expected host:count, got {item!r}")
        out[host.strip("[]")] = int(count)
    return out


@dataclass(frozen=True)
class Limits:
    """Limits (Kafka's names)."""

    __slots__ = ()

    max_frame_bytes: int = setting(
        DEFAULT_MAX_FRAME_BYTES,
        flag="--max-frame-bytes",
        default_means="100 MiB (Kafka's)",
        # A frame can't be smaller than a header, and a size field is an int32.
        check=between(64, 2**31 - 1),
        why="larger frames close the connection, as Kafka's socket.request.max.bytes does",
    )
    connections_max_idle_ms: int = setting(
        600000,
        flag="--connections-max-idle-ms",
        see="operations.md#limit-connections",
        check=at_least(1),
        why="close a connection with no request in flight and no traffic for this long",
    )
    max_connections: int = setting(
        UNLIMITED,
        default_means=_NO_LIMIT,
        flag="--max-connections",
        check=at_least(1),
        why="connections in total; over it a new connection is closed at once",
    )
    max_connections_per_ip: int = setting(
        UNLIMITED,
        default_means=_NO_LIMIT,
        flag="--max-connections-per-ip",
        check=at_least(1),
        why="connections per client address; over it a new connection is closed at once",
    )
    max_connections_per_ip_overrides: str = setting(
        "",
        flag="--max-connections-per-ip-overrides",
        metavar="HOST:N,...",
        check=parsed_by(parse_ip_overrides),
        default_means="none",
        example="127.0.0.1:1000,10.0.0.7:50",
        why='"host:count,host:count" exceptions to max_connections_per_ip, as Kafka writes them',
    )
    max_connection_creation_rate: int = setting(
        UNLIMITED,
        default_means=_NO_LIMIT,
        flag="--max-connection-creation-rate",
        check=at_least(1),
        why="new connections a second, across all workers; over it a new connection is held "
        "unread until its turn (as Kafka's acceptor throttles), closed if that would take "
        "longer than connection_first_request_timeout_ms",
    )
    # Not Kafka's: without it a half-open or trickling client is only found
    # connections_max_idle_ms (10 min) later, holding a socket and its buffers all that time.
    connection_first_request_timeout_ms: int = setting(
        10000,
        flag="--connection-first-request-timeout-ms",
        check=at_least(1),
        why="a client must complete its first request within this long after connecting, "
        "else it is closed; 10 s like upstream_connect_timeout_s",
    )
    # Kafka's default is -1 (unlimited); 256 MiB bounds memory yet fits two
    # max_frame_bytes frames.
    queued_max_request_bytes: int = setting(
        256 * 1024 * 1024,
        flag="--queued-max-request-bytes",
        default_means="256 MiB (Kafka's: -1)",
        check=at_least(1, unless=-1),
        why="bytes buffered gateway-wide in partial requests and undelivered responses; "
        "over it, connections holding such bytes stop being read; -1: no limit",
    )
    # Not Kafka's: a client announces whatever strings it likes, so without a cap one
    # could add series, and /metrics memory, without bound.
    max_client_software_labels: int = setting(
        1000,
        flag="--max-client-software-labels",
        check=at_least(1),
        why="distinct KIP-511 client software (name, version) pairs with metric labels of "
        'their own, per worker; more are labelled "other"',
    )
    # Not Kafka's: the bounded record of client identities served on /clients.
    max_client_identities: int = setting(
        1000,
        check=at_least(1),
        see="operations.md#who-connects-from-where-since-when-clients",
        why="client identities (software or client id) kept per worker for /clients, "
        "with their peers, first/last seen and versions; past it the least recently "
        "seen is dropped",
    )
