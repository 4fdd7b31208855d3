"""What the connection's logs and metrics say of a request, named by the protocol layer:
the connection itself knows no API by name or number."""

from __future__ import annotations

from time import perf_counter

from ._apis import api_name
from ._entry import InFlightRequest


def api_of(entry: InFlightRequest) -> str:
    """The API's name (e.g. for a metric's label)."""
    return api_name(entry.api_key)


def answered_fields(entry: InFlightRequest) -> dict[str, object]:
    """The request log's fields of an answered request: which, how long, how large, and
    who answered (the gateway itself or the upstream)."""
    return {
        "api": api_name(entry.api_key),
        "api_version": entry.api_version,
        "correlation_id": entry.correlation_id,
        "latency_ms": round((perf_counter() - entry.started) * 1000, 3),
        "request_bytes": entry.request_bytes,
        "response_bytes": entry.response_bytes,
        "outcome": "gateway" if entry.local is not None else "upstream",
    }
