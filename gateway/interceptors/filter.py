"""What an intercepted API declares: one ``Filter`` per API key (Kroxylicious' model).

A filter says, once, what the gateway does with its API beyond forwarding it opaque:

* its **responses**: from which version they are rewritten (``rewritten_from``) and
  which part of them holds the broker endpoints (``mode``), which decides how the
  response travels through the gateway: gathered whole, its head held back while the
  bulk streams (``Mode.HEAD``), or, from ``stream_tail_from`` bytes on, streamed with
  only its tagged section held back (``Mode.TAIL``); ``after_rewrite`` adds to a whole
  rewritten body what the address rewrite does not (DescribeCluster's KIP-885 tags);
* its **requests**: whether the gateway answers them itself (``answer``), on which
  connections (``answers_when``), for which versions (the negotiated ones, or every
  one with ``any_version``), and whether it then serves the API whatever versions the
  upstream offers (``replaces_upstream``). A held-back request no filter answers is
  rejected as Kafka would (``reject``);
* what it **observes**: requests held back only to be shown to a hook
  (``sees_request``) and then forwarded exactly as they came, and responses gathered
  whole only to be shown to one (``sees_response``) and forwarded as they came
  (SaslAuthenticate: who logged in). Their versions are not capped to the codec.

The declarations live one module per API in ``gateway.interceptors.apis``; the registry
(``gateway.interceptors.registry``) collects them and derives every table the runtime
uses.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from ..protocol import InFlightRequest, RequestFrame
from ..versions import VersionRange
from .context import Exchange, GatewayView

# Answers a request the gateway handles itself: (connection, request, request body).
RequestHook = Callable[[Exchange, RequestFrame, memoryview], None]
# After the address rewrite of a whole response body: (connection, version, body) → body.
ResponseHook = Callable[[Exchange, int, bytes], bytes]
# Shown a response that passes unchanged: (connection, the request it answers, payload).
ResponseObserver = Callable[[Exchange, InFlightRequest, memoryview], None]
# Whether a connection to an upstream with these ranges has its requests answered here.
Applies = Callable[[GatewayView, dict[int, VersionRange]], bool]


class Mode(enum.Enum):
    """Where a rewritten response's broker endpoints are (``gateway.interceptors.endpoints``)."""

    # Anywhere: the response is gathered whole, then rewritten.
    WHOLE = "whole"
    # In one array before the bulk of the body (Metadata's brokers): only the head up to
    # its end is held back; the compiled lane may replace a head it has seen rewritten.
    HEAD = "head"
    # Only in the body's top-level tagged section (KIP-951's NodeEndpoints): the
    # compiled lane walks to it and forwards a response whose section is empty itself.
    TAIL = "tail"


def always(gw: GatewayView, upstream: dict[int, VersionRange]) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Filter:
    api_key: int
    # -- responses ---------------------------------------------------------------------
    # The first version whose response is rewritten; None: responses pass untouched.
    rewritten_from: int | None = None
    mode: Mode = Mode.WHOLE
    # Mode.TAIL: responses from this size on stream through, only their tagged section
    # held back; smaller ones are gathered whole (None: always gathered whole).
    stream_tail_from: int | None = None
    after_rewrite: ResponseHook | None = None
    # -- requests ----------------------------------------------------------------------
    answer: RequestHook | None = None
    answers_when: Applies = always
    # Every version reaches ``answer`` (ApiVersions answers versions it lacks itself, as
    # KIP-511 asks); otherwise only negotiated versions do and the rest are rejected.
    any_version: bool = False
    # The upstream does not limit the versions: the gateway serves the API for it.
    replaces_upstream: bool = False
    # -- observed (the bytes pass unchanged) -------------------------------------------
    # Shown each negotiated version's request, which is then forwarded as it came.
    sees_request: RequestHook | None = None
    # Shown each response, gathered whole, which then goes to the client as it came.
    sees_response: ResponseObserver | None = None

    def __post_init__(self) -> None:
        rewrites = self.rewritten_from is not None
        if not rewrites and (self.mode is not Mode.WHOLE or self.after_rewrite is not None):
            raise ValueError(f"api key {self.api_key}: a response mode needs rewritten_from")
        if self.stream_tail_from is not None and self.mode is not Mode.TAIL:
            raise ValueError(f"api key {self.api_key}: stream_tail_from needs Mode.TAIL")
        if self.answer is None and (self.any_version or self.replaces_upstream):
            raise ValueError(f"api key {self.api_key}: request options need an answer hook")
        observes = self.sees_request is not None or self.sees_response is not None
        if observes and (rewrites or self.answer is not None):
            raise ValueError(f"api key {self.api_key}: an observed API is not also changed")
        if not rewrites and self.answer is None and not observes:
            raise ValueError(f"api key {self.api_key}: the filter intercepts nothing")
