"""Logs, metrics and health: what the gateway tells its operator.

The top level and [log] of the TOML file.
"""

# setting() is a dataclasses.field with metadata; ruff only knows field() itself as one.
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from ._declare import ConfigError, Fraction, HostPort, Seconds, Shape, at_least, positive, setting

LogFormat = Literal["auto", "json", "console"]
# Any case, kept as written: the flag's choices are lower case, a file may say "DEBUG".
LogLevel = Annotated[Literal["debug", "info", "warning", "error"], Shape(any_case=True)]


def _release(key: str, value: str | None) -> None:
    if value is None:
        return
    # Imported here: the release tables sit beside the protocol code, which reads config.
    from ..versions import release_named

    try:
        release_named(value)
    except (KeyError, ValueError) as exc:
        raise ConfigError(key, str(exc.args[0]).strip("'\"")) from None


@dataclass(frozen=True)
class Observability:
    """Logs, metrics and health."""

    __slots__ = ()

    log_format: LogFormat = setting(
        "auto",
        table="log",
        name="format",
        flag="--log-format",
        why="auto: console on a TTY, JSON otherwise",
    )
    log_level: LogLevel = setting(
        "info",
        table="log",
        name="level",
        flag="--log-level",
        why="the least severe level logged",
    )
    log_requests: Fraction = setting(
        0.0,
        table="log",
        name="requests",
        why="the fraction of requests logged when answered (0: off, 1: all)",
    )
    log_request_level: LogLevel = setting(
        "info",
        table="log",
        name="request_level",
        why="the level of request-log lines",
    )
    log_bad_input_burst: int = setting(
        10,
        table="log",
        name="bad_input_burst",
        check=at_least(1),
        why="lines about bad input: at most this many per event and interval",
    )
    log_bad_input_interval_s: Seconds = setting(
        10.0,
        table="log",
        name="bad_input_interval_s",
        check=positive,
        why='that interval; the next line after one with more says how many were "suppressed"',
    )
    metrics_listen: HostPort | None = setting(
        None,
        flag="--metrics-listen",
        default_means="off",
        example="0.0.0.0:9404",
        see="operations.md#scrape-metrics-and-check-health",
        why="serve /metrics (Prometheus), /healthz, /readyz and /connections here",
    )
    upgrade_target_release: str | None = setting(
        # No flag: a flag would win over the file, which SIGHUP re-reads.
        None,
        check=_release,
        example="4.0",
        see="operations.md#before-the-next-kafka-release-upgrade_target_release",
        why="the Kafka release the brokers go to next (4.0): requests it would refuse are "
        "counted (kafka_gateway_requests_below_target_release_total) and /clients marks "
        "who would break; re-read from the config file on SIGHUP",
    )
    readiness_upstream_check_ms: int = setting(
        5000,
        check=at_least(0),
        why="/readyz answers 503 while the upstream does not answer ApiVersions, checked "
        "this often (gateway.server.upstream_watch); 0: the listeners only, as Kafka's own",
    )
