"""One request of a connection, from its frame until its response went out.

Its own module because the in-flight table, the SASL exchange and the traffic counts
all take these entries; none of them needs the others to name the type.
"""

from __future__ import annotations

from time import perf_counter


class InFlightRequest:
    """A request whose response is awaited (or, when ``local`` is set, already made)."""

    __slots__ = (
        "api_key",
        "api_version",
        "context",
        "correlation_id",
        "expects_response",
        "local",
        "request_bytes",
        "response_bytes",
        "started",
        "to_upstream",
    )

    def __init__(
        self,
        api_key: int,
        api_version: int,
        correlation_id: int,
        to_upstream: bool = True,
        expects_response: bool = True,
    ) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.started = perf_counter()
        # Frame sizes (length prefix included), for the request log.
        self.request_bytes = 0
        self.response_bytes = 0
        # A response the gateway produced itself; it is released to the client once
        # every earlier upstream response has gone out, because clients (the Java one
        # in particular) require responses in request order.
        self.local: bytes | None = None
        # Free slot for an interceptor that must remember something about the request
        # until its response arrives.
        self.context: object = None
        # False for a request the gateway answers itself (never sent upstream), so an
        # upstream response is never matched to it.
        self.to_upstream = to_upstream
        # False for an acks=0 produce: kept only to recognise a broker that answers it.
        self.expects_response = expects_response
