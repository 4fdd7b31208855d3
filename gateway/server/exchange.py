"""A connection as interceptors see it (``gateway.interceptors.context.Exchange``), and
the door to them. One ``ConnectionExchange`` per connection, made and held by
``pair.Pair``, which hands it to ``gateway.interceptors.dispatch``; interceptors
never see the connection itself.

The connection knows no API by name. Interceptors registered by API key decide: the
exchange's pass-through table (the negotiated ranges minus the keys answered here)
forwards a request after one dict lookup (``intercepts``); a request it holds back goes
to ``dispatch.on_request``, which answers it locally (ApiVersions, UpdateFeatures, a
synthesized DescribeCluster), shows it to an observer and forwards it as it came
(``forward``: SaslAuthenticate), or rejects it as Kafka would; a response whose key asked
for it comes back rewritten from ``dispatch.rewrite_*``.

What interceptors send goes into the pair's outbox, never to a socket: in a read it goes
out with the read's output, in its order; outside one (an answer a task made) the pair
tells its adapter (``Pair.wrote``).

The exchange also hears how the connection's SASL logins end (``sasl_settled``, as the
sans-I/O login's ``LoginWatcher``) and applies them (``gateway.server.logins``)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from ..client_info import ClientInfo
from ..config import HostPort
from ..features.report import FeatureReport
from ..interceptors import dispatch
from ..interceptors.context import InternalHandler
from ..observability.logging import RateLimitedLogger
from ..protocol import (
    InFlight,
    InFlightRequest,
    ProtocolViolation,
    RequestFrame,
    SaslLogin,
    api_of,
    frame,
)
from ..versions import VersionRange
from . import logins
from .outbox import Outbox
from .services import Folding, GatewayServices

# Lines about bad input, which a client (or a broker) can trigger once per frame.
limited = RateLimitedLogger("gateway.proxy")

# Correlation ids of the gateway's own upstream requests: negative, which no client uses.
_internal_ids = itertools.count(-(2**31))


class Exchanging(Protocol):
    """What the exchange reads and does of its connection (``pair.Pair``)."""

    gateway: GatewayServices
    listener: str
    peer: str
    principal: str | None
    tls_subject: str | None
    info: ClientInfo | None
    upstream_address: HostPort
    ranges: dict[int, VersionRange] | None
    upstream_ranges: dict[int, VersionRange]
    upstream_features: FeatureReport
    feature_report: FeatureReport
    inflight: InFlight
    # What its sockets are to be given (``outbox.Outbox``).
    outbox: Outbox
    # The connection's counts (``traffic.Traffic``): interceptors may fold them.
    traffic: Folding

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...
    def who(self) -> dict[str, object]: ...
    def answered_here(self) -> None: ...
    def wrote(self) -> None: ...


class ConnectionExchange:
    """What interceptors may know and do about one connection."""

    __slots__ = ("_conn", "gateway", "passthrough")

    def __init__(self, conn: Exchanging) -> None:
        self._conn = conn
        self.gateway = conn.gateway
        # Told how each SASL login of the connection ends (none without SASL).
        conn.inflight.sasl.watcher = self
        # The negotiated ranges minus the keys answered here: what passes untouched
        # (``Pair.renegotiate``).
        self.passthrough: dict[int, VersionRange] = {}

    # -- the pass-through table, and what happens to what it holds back ----------------
    def intercepts(self, api_key: int, api_version: int) -> bool:
        """The ``RequestReader``'s policy: whether this request goes to the interceptors."""
        # Runs once per request: one dict lookup against the ranges that may pass through
        # untouched (advertised ranges minus the APIs the gateway answers itself).
        allowed = self.passthrough.get(api_key)
        if allowed is None:
            return not dispatch.forwards_unknown(self, api_key, api_version)
        return api_version < allowed[0] or api_version > allowed[1]

    def handler_failed(self, request: RequestFrame, exc: Exception) -> None:
        """An interceptor raised on a client's request: log (rate-limited, with the
        traceback), count, and close this connection as Kafka closes on a request it
        cannot handle."""
        self.gateway.metrics.refused(
            "handler_error",
            self.listener,
            self.info,
            request.header.api_key,
            request.header.api_version,
        )
        limited.error(
            "request.handler_failed",
            api_key=request.header.api_key,
            version=request.header.api_version,
            error=repr(exc),
            **self._conn.who(),
        )
        self._conn.close()

    def violated(self, side: str, violation: ProtocolViolation) -> None:
        """Log and count a protocol violation by ``side``, and close the connection."""
        conn = self._conn
        self.gateway.metrics.refused(violation.reason, conn.listener, conn.info)
        limited.warning(
            "connection.protocol_violation",
            side=side,
            reason=violation.reason,
            detail=violation.detail,
            listener=conn.listener,
            **conn.who(),
        )
        conn.close()

    # -- the connection's state, read-only -----------------------------------------------
    @property
    def listener(self) -> str:
        return self._conn.listener

    @property
    def peer(self) -> str:
        return self._conn.peer

    @property
    def principal(self) -> str | None:
        return self._conn.principal

    @property
    def tls_subject(self) -> str | None:
        return self._conn.tls_subject

    @property
    def info(self) -> ClientInfo | None:
        return self._conn.info

    @property
    def upstream_address(self) -> HostPort:
        return self._conn.upstream_address

    @property
    def ranges(self) -> dict[int, VersionRange] | None:
        return self._conn.ranges

    @property
    def upstream_ranges(self) -> dict[int, VersionRange]:
        return self._conn.upstream_ranges

    @property
    def upstream_features(self) -> FeatureReport:
        return self._conn.upstream_features

    @property
    def feature_report(self) -> FeatureReport:
        return self._conn.feature_report

    @property
    def closed(self) -> bool:
        return self._conn.closed

    @property
    def sasl_login(self) -> SaslLogin | None:
        return self._conn.inflight.sasl.login

    # -- SASL logins (``protocol.LoginWatcher``) -----------------------------------------
    @property
    def sasl_claim(self) -> str:
        """The OAUTHBEARER token claim that names who logged in."""
        return self.gateway.config.sasl_oauthbearer_sub_claim_name

    def sasl_settled(self, login: SaslLogin, previous: str | None) -> None:
        logins.settled(self._conn, login, previous)

    # -- what interceptors may do -------------------------------------------------------
    # Nothing goes into a closed pair's outbox: its sockets are closed, or closing.
    def answer(self, entry: InFlightRequest, payload: bytes) -> None:
        conn = self._conn
        frames = conn.inflight.answer_locally(entry, frame(payload))
        if frames and not conn.closed:
            conn.outbox.client += frames
        conn.answered_here()
        conn.wrote()

    def forward(self, request: RequestFrame) -> None:
        # Held back as answered requests are (its entry made then, in the client's
        # order), it goes upstream after all: its answer is now the broker's.
        request.request.to_upstream = True
        conn = self._conn
        if not conn.closed:
            conn.outbox.upstream.append(request.frame)
            conn.wrote()

    def ask_upstream(
        self, api_key: int, build: Callable[[int], tuple[int, bytes]], handler: InternalHandler
    ) -> int:
        conn = self._conn
        correlation_id = next(_internal_ids)
        version, request = build(correlation_id)
        entry = conn.inflight.add(api_key, version, correlation_id)
        entry.context = handler
        if not conn.closed:
            conn.outbox.upstream.append(request)
            conn.wrote()
        return version

    def send_unanswered(self, entry: InFlightRequest, request: bytes) -> None:
        conn = self._conn
        if not conn.closed:
            conn.outbox.upstream.append(request)
        # No entry for it: only Kafka 4 upstreams are bridged, and Kafka answers no
        # acks=0 produce (an answer would be dropped as uncorrelated, and counted).
        frames = conn.inflight.withdraw(entry)
        if frames and not conn.closed:
            conn.outbox.client += frames
        conn.answered_here()
        conn.wrote()

    def violation(self, side: str, reason: str, detail: str) -> None:
        self.violated(side, ProtocolViolation(reason, detail))

    def rewrite_failed(self, entry: InFlightRequest, error: str) -> None:
        name = api_of(entry)
        self.gateway.metrics.rewrite_errors.labels(name).inc()
        limited.error(
            "response.rewrite_failed",
            api=name,
            version=entry.api_version,
            error=error,
            peer=self._conn.peer,
        )

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        asyncio.get_running_loop().create_task(work)

    def close(self) -> None:
        self._conn.close()

    def who(self) -> dict[str, object]:
        return self._conn.who()

    def fold_stats(self) -> None:
        self._conn.traffic.fold()
