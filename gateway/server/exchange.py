"""What interceptors may do with a connection (``gateway.interceptors.context.Exchange``),
and how the connection hands them what its pass-through table holds back: a mixin of
``ClientConnection``, which talks to interceptors only through
``gateway.interceptors.dispatch``."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ..interceptors import dispatch
from ..interceptors.context import InternalHandler
from ..observability.logging import RateLimitedLogger
from ..protocol import (
    InFlightRequest,
    ProtocolViolation,
    RequestFrame,
    answered_fields,
    api_of,
    frame,
)

if TYPE_CHECKING:
    from ..clients import ClientInfo
    from ..protocol import InFlight
    from ..versions import VersionRange
    from .services import GatewayServices

# Lines about bad input, which a client (or a broker) can trigger once per frame.
limited = RateLimitedLogger("gateway.proxy")

# Correlation ids of the gateway's own upstream requests: negative, which no client uses.
_internal_ids = itertools.count(-(2**31))


class InterceptorExchange:
    """``ClientConnection``'s side that interceptors see."""

    __slots__ = ()

    if TYPE_CHECKING:
        gateway: GatewayServices
        inflight: InFlight
        info: ClientInfo | None
        listener: str
        peer: str
        client: asyncio.Transport | None
        upstream: asyncio.Transport | None
        _closed: bool
        _passthrough: dict[int, VersionRange]

        def close(self) -> None: ...
        def _scan_state(self) -> None: ...

    # -- the pass-through table, and what happens to what it holds back ----------------
    def _intercept_request(self, api_key: int, api_version: int) -> bool:
        # Runs once per request: one dict lookup against the ranges that may pass through
        # untouched (advertised ranges minus the APIs the gateway answers itself).
        allowed = self._passthrough.get(api_key)
        if allowed is None:
            return not dispatch.forwards_unknown(self, api_key, api_version)
        return api_version < allowed[0] or api_version > allowed[1]

    def _handler_failed(self, request: RequestFrame, exc: Exception) -> None:
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
            **self.who(),
        )
        self.close()

    def _log_request(self, entry: InFlightRequest) -> None:
        """The in-flight table's observer: each answered request."""
        request_log = self.gateway.request_log
        if request_log is None or entry.context is not None or not request_log.sampled():
            return
        request_log.emit(
            "request.completed", **answered_fields(entry), listener=self.listener, **self.who()
        )

    # -- what interceptors may do (gateway.interceptors.context.Exchange) -----------------
    @property
    def closed(self) -> bool:
        return self._closed

    def answer(self, entry: InFlightRequest, payload: bytes) -> None:
        self._release(self.inflight.answer_locally(entry, frame(payload)))
        self._scan_state()

    def ask_upstream(
        self, api_key: int, build: Callable[[int], tuple[int, bytes]], handler: InternalHandler
    ) -> int:
        correlation_id = next(_internal_ids)
        version, request = build(correlation_id)
        entry = self.inflight.add(api_key, version, correlation_id)
        entry.context = handler
        assert self.upstream is not None
        self.upstream.write(request)
        return version

    def violation(self, side: str, reason: str, detail: str) -> None:
        self._violation(side, ProtocolViolation(reason, detail))

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        asyncio.get_running_loop().create_task(work)

    def _release(self, frames: list[bytes]) -> None:
        if self.client is not None and frames:
            self.client.writelines(frames)

    def who(self) -> dict[str, object]:
        return self.info.log_fields() if self.info is not None else {"peer": self.peer}

    # -- shared ----------------------------------------------------------------------
    def rewrite_failed(self, entry: InFlightRequest, error: str) -> None:
        name = api_of(entry)
        self.gateway.metrics.rewrite_errors.labels(name).inc()
        limited.error(
            "response.rewrite_failed",
            api=name,
            version=entry.api_version,
            error=error,
            peer=self.peer,
        )

    def _violation(self, side: str, violation: ProtocolViolation) -> None:
        self.gateway.metrics.refused(violation.reason, self.listener, self.info)
        limited.warning(
            "connection.protocol_violation",
            side=side,
            reason=violation.reason,
            detail=violation.detail,
            listener=self.listener,
            **self.who(),
        )
        self.close()
