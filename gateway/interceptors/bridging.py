"""The bridge at work on a connection: what ``dispatch`` calls for a request the
pass-through table held back, and what ApiVersions tells a client the bridge serves.

A request at a version the upstream removed (``plan``) from a client the policy lets
through (``policy``) is converted up (``convert``) and its verdict is to ask the upstream
first (``AskUpstream``: the gateway's own request on the client's connection, a negative
correlation id); the answer, converted down, is the client's, in its turn with its
correlation id. An acks=0 produce goes up unanswered (``Forward(answered=False)``). The
connection itself only knows that ``dispatch`` held the request back.
"""

from __future__ import annotations

import struct
import time

from ..bridge import plan, policy
from ..bridge.convert import request_up
from ..config import Config
from ..kafka_client import request_frame, response_body
from ..observability.logging import RateLimitedLogger
from ..protocol import RequestFrame, api_name, api_spec, response_header
from ..versions import VersionRange
from .api_versions import read_client_software
from .context import Exchange
from .filter import Answer, AskUpstream, Close, Forward, RequestVerdict

limited = RateLimitedLogger("gateway.bridge")
# Client identities already logged as bridged (bounded: past it, the rate limit alone).
_LOGGED_MAX = 10_000
_logged: set[tuple[str, str, str | None]] = set()


def serves(ctx: Exchange, client_id: str | None, software: tuple[str, str] | None = None) -> bool:
    """Whether the policy lets the bridge serve this connection's client."""
    config = ctx.gateway.config
    if software is None:
        software = ctx.info.software if ctx.info is not None else ("unknown", "unknown")
    rules = _rules(config)
    return (
        policy.decide(rules, config.bridge_old_clients, software, client_id, ctx.principal)
        == policy.BRIDGE
    )


class PolicyFileError(ValueError):
    """``[bridge] policy_file`` does not load (SIGHUP keeps the rules before it)."""

    key = "bridge.policy_file"


# The rules in force: [bridge] policy_file's (read at the first use and on SIGHUP),
# then [bridge] policy's, parsed once per distinct config.
_file_rules: dict[str, tuple[policy.Rule, ...]] = {}
_parsed: dict[tuple[str, ...], tuple[policy.Rule, ...]] = {}


def _rules(config: Config) -> tuple[policy.Rule, ...]:
    inline = _parsed.get(config.bridge_policy)
    if inline is None:
        inline = _parsed[config.bridge_policy] = policy.parse_rules(config.bridge_policy)
    path = config.bridge_policy_file
    if path is None:
        return inline
    from_file = _file_rules.get(path)
    if from_file is None:
        from_file = _file_rules[path] = policy.read_rules_file(path)  # checked at start
    return from_file + inline


def reload_policy(config: Config) -> bool:
    """SIGHUP: read ``[bridge] policy_file`` again; True when its rules changed. Raises
    PolicyFileError (the rules before it stay) when it does not load."""
    path = config.bridge_policy_file
    if path is None:
        return False
    try:
        rules = policy.read_rules_file(path)
    except ValueError as exc:
        raise PolicyFileError(str(exc)) from None
    changed = _file_rules.get(path) != rules
    _file_rules[path] = rules
    return changed


# ApiVersions v3 (KIP-511) came with Kafka 2.4's clients, which speak only versions
# Kafka 4 kept: a client asking v3 or later is told the broker's ranges, unchanged. One
# that sends removed versions after all (sarama with an old Config.Version sends what
# that release spoke, whatever the ranges) is still bridged: ``carry`` goes by each
# request's version, not by what the client was told.
FIRST_MODERN_API_VERSIONS = 3


def advertised(
    ctx: Exchange,
    ranges: dict[int, VersionRange],
    api_version: int,
    client_id: str | None,
    body: bytes | memoryview | None = None,
) -> dict[int, VersionRange]:
    """The ranges an ApiVersions answer tells this client: with the bridged versions for
    an old client (ApiVersions v0-2) the bridge serves, within its ``cap`` where a rule
    caps it; ``ranges`` (every connection's) for any other. ``body``: the request's, for
    the KIP-511 software of a v3+ one (it names the client before the answer does)."""
    old = api_version < FIRST_MODERN_API_VERSIONS and bool(plan.plans(ctx.upstream_ranges))
    config = ctx.gateway.config
    rules = _rules(config)
    capping = any(rule.action == policy.CAP for rule in rules)
    if not old and not capping:
        return ranges
    software = ctx.info.software if ctx.info is not None else ("unknown", "unknown")
    if body is not None and api_version >= FIRST_MODERN_API_VERSIONS and capping:
        name, version = read_client_software(body)
        if name and version:
            software = (name, version)
    rule = policy.matching(rules, software, client_id, ctx.principal)
    if policy.verdict(rule, config.bridge_old_clients) == policy.REFUSE:
        return ranges
    told = plan.widen(ranges, ctx.upstream_ranges) if old else ranges
    if rule is None or rule.action != policy.CAP:
        return told
    ctx.gateway.metrics.bridge.capped.inc()
    cap = rule.describe_cap()
    identity = ("capped", cap, client_id)
    if identity not in _logged:
        if len(_logged) < _LOGGED_MAX:
            _logged.add(identity)
        limited.info("bridge.versions_capped", cap=cap, **ctx.who())
    return rule.capped(told)


def carry(ctx: Exchange, request: RequestFrame, body: memoryview) -> RequestVerdict | None:
    """The verdict for a held-back request at a version the upstream removed, from a
    client the policy lets through; None leaves it to be refused as Kafka would."""
    header = request.header
    bridged = plan.plans(ctx.upstream_ranges).get(header.api_key)
    if bridged is None or not bridged.carries(header.api_version):
        return None
    if not serves(ctx, header.client_id):
        return None
    metrics = ctx.gateway.metrics.bridge
    started = time.process_time()
    target = bridged.target
    try:
        up = request_up(header.api_key, header.api_version, target, body)
    except (ValueError, struct.error) as exc:  # Malformed, RecordsError, a value out of range
        return Close("malformed_request", f"bridge: {exc}")
    name = api_name(header.api_key)
    metrics.requests.labels(name, str(header.api_version), str(target)).inc()
    _note(ctx, name, header.api_version, target, header.client_id)
    if not up.awaited:
        frame = request_frame(
            header.api_key, target, header.correlation_id, up.body, header.client_id
        )
        metrics.cpu.inc(time.process_time() - started)
        return Forward(frame, answered=False)
    spec = api_spec(header.api_key)
    assert spec is not None  # a bridged key is one of Kafka's
    client_header = response_header(
        header.correlation_id, spec.response_header_version(header.api_version)
    )

    def down(payload: memoryview) -> Answer:
        # An answer the bridge cannot bring down raises: the client could not read it
        # either, and the connection closes (``AskUpstream``).
        began = time.process_time()
        answer = up.down(response_body(header.api_key, target, payload))
        if answer.headers_dropped:
            metrics.headers_dropped.inc(answer.headers_dropped)
        metrics.cpu.inc(time.process_time() - began)
        return Answer(client_header + answer.body)

    metrics.cpu.inc(time.process_time() - started)
    return AskUpstream(
        header.api_key,
        lambda cid: (target, request_frame(header.api_key, target, cid, up.body, header.client_id)),
        down,
    )


def _note(ctx: Exchange, api: str, version: int, target: int, client_id: str | None) -> None:
    """Count the connection as bridged at its first bridged request, and log each client
    identity the first time it is bridged (rate-limited)."""
    info = ctx.info
    if info is not None:
        if not info.bridged:
            ctx.gateway.metrics.bridge.connections.inc()
        info.bridged += 1
        if info.record is not None:  # /clients: the identity's bridged requests
            info.record.bridged += 1
    software = info.software if info is not None else ("unknown", "unknown")
    identity = (*software, client_id)
    if identity in _logged:
        return
    if len(_logged) < _LOGGED_MAX:
        _logged.add(identity)
    limited.info(
        "bridge.client_bridged",
        api=api,
        from_version=version,
        to_version=target,
        **ctx.who(),
    )
