# cython: language_level=3, annotation_typing=False
"""One request in flight, in one source for both builds: Cython compiles this file as it
stands into the compiled scanner's entry type (``_inflight_entry.pxd`` gives its C
fields), and without a C compiler it imports as plain Python. The in-flight table
(``InFlight.entries``) holds these alone: the scanner's entries and the readers' are one
kind (``_scanner`` says which build a process runs; ``_entry`` names it).
"""

from __future__ import annotations

from time import perf_counter

try:
    import cython
except ModuleNotFoundError:  # uncompiled, without Cython installed
    from . import _nocython as cython  # type: ignore[no-redef]


# Entries come and go with every request: 64 kept for reuse spare the allocator (compiled).
@cython.freelist(64)
@cython.cclass
class InFlightRequest:
    """A request whose response is awaited (or, when ``local`` is set, already made).

    ``request_bytes``/``response_bytes``: frame sizes, length prefix included (the
    request log). ``local``: a response the gateway made, released once every earlier
    upstream response went out. ``context``: an interceptor's note until the response.
    ``to_upstream`` False: answered here, never matched to an upstream response;
    ``expects_response`` False: an acks=0 produce, kept to recognise a broker that
    answers it (see ``InFlight``)."""

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
        self.request_bytes = 0
        self.response_bytes = 0
        self.local: bytes | None = None
        self.context: object = None
        self.to_upstream = to_upstream
        self.expects_response = expects_response
