"""What an intercepted API declares: one ``Filter`` per API key (Kroxylicious' model).

A filter says, once, what the gateway does with its API beyond forwarding it opaque:

* its **requests**: a hook (``on_request``) shown each request the connection holds
  back for it, which returns what becomes of it (below); on which connections they are
  held back (``requests_when``), for which versions (the negotiated ones, or every one
  with ``any_version``), and whether the gateway then serves the API whatever versions
  the upstream offers (``replaces_upstream``). A held-back request no hook takes is
  rejected as Kafka would (``reject``);
* its **responses**: from which version they are rewritten (``rewritten_from``) and
  which part of them holds the broker endpoints (``mode``), which decides how the
  response travels through the gateway: gathered whole, its head held back while the
  bulk streams (``Mode.HEAD``), or, from ``stream_tail_from`` bytes on, streamed with
  only its tagged section held back (``Mode.TAIL``); a hook (``on_response``) shown a
  whole response's body after the address rewrite, which returns what the client gets;
* whether it only **observes** (``observes``): its frames are not decoded with the
  codec (so their versions are not capped to it), responses are shown to
  ``on_response`` from the first version on, and a hook that fails lets the frame pass
  as it came (SaslAuthenticate: who logged in).

What a hook returns is a verdict, never an action taken behind the connection's back:

* a request: ``Forward`` (as it came, or another frame in its place), ``Answer`` (here,
  in the client's order), ``Close`` (as Kafka closes on a request it will not serve),
  ``AskUpstream`` (the gateway's own request first; its answer decides) or ``Later`` (a
  coroutine decides: an answer that waits on ZooKeeper);
* a response: ``Forward`` (as it came, or another body) or ``Close`` (with a reason,
  counted as a protocol violation by the upstream, whose answer it was; the responses
  before it still reach the client).

``gateway.interceptors.verdicts`` carries them out. The declarations live one module
per API in ``gateway.interceptors.apis``; the registry (``gateway.interceptors.registry``)
collects them and derives every table the runtime uses, what the lane must hold back
and decode among them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..observability.metrics import REJECT_REASONS
from ..protocol import InFlightRequest, RequestFrame
from ..versions import VersionRange
from .context import Exchange, GatewayView


@dataclass(frozen=True, slots=True)
class Forward:
    """Send it on, as it came (``data`` None) or changed. A request goes upstream,
    ``data`` a whole frame in its place that keeps its API key, version and correlation
    id (its answer is the broker's, in the client's turn); with ``answered`` False, one
    Kafka does not answer (an acks=0 produce), and the client awaits nothing. A response
    goes to the client, ``data`` the body after its response header."""

    data: bytes | None = None
    answered: bool = True


# A request or response sent on unchanged: the commonest verdict, made once.
AS_IT_CAME = Forward()


@dataclass(frozen=True, slots=True)
class Answer:
    """Answer the request here: ``payload`` is the whole response after the length
    prefix (header and body), sent in the client's order."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class Close:
    """Close the connection. With a ``reason`` (one of ``REJECT_REASONS``, the bounded
    labels of kafka_gateway_rejected_requests_total), logged and counted as a protocol
    violation by ``side``; without one the hook has said why itself (a rejection is
    logged and counted as one)."""

    reason: str | None = None
    detail: str = ""
    side: str = "client"

    def __post_init__(self) -> None:
        if self.reason is not None and self.reason not in REJECT_REASONS:
            raise ValueError(f"{self.reason!r} is not one of {REJECT_REASONS}")


@dataclass(frozen=True, slots=True)
class AskUpstream:
    """Send the gateway's own request upstream first, on the client's connection:
    ``build(correlation_id)`` gives (version, whole frame), and ``then`` turns its
    answer (the payload after the length prefix) into the request's verdict. A ``then``
    that raises closes the connection: the answer it could not read is logged as a
    response that could not be rewritten."""

    api_key: int
    build: Callable[[int], tuple[int, bytes]]
    then: Callable[[memoryview], RequestVerdict]


@dataclass(frozen=True, slots=True)
class Later:
    """The verdict comes from ``work``, run on the connection's loop (an answer that
    waits on ZooKeeper); nothing is sent if the connection closed meanwhile."""

    work: Coroutine[Any, Any, RequestVerdict]


RequestVerdict = Forward | Answer | Close | AskUpstream | Later
ResponseVerdict = Forward | Close

# Shown a held-back request: (connection, request, its body) → what becomes of it.
RequestHook = Callable[[Exchange, RequestFrame, memoryview], RequestVerdict]
# Shown a whole response: (connection, the request it answers, its body: after the
# address rewrite where the filter rewrites) → what the client gets.
ResponseHook = Callable[[Exchange, InFlightRequest, memoryview], ResponseVerdict]
# Whether a connection to an upstream with these ranges holds this API's requests back.
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
    # -- requests ----------------------------------------------------------------------
    on_request: RequestHook | None = None
    requests_when: Applies = always
    # Every version reaches ``on_request`` (ApiVersions answers versions it lacks
    # itself, as KIP-511 asks); otherwise only negotiated versions do, the rest are
    # rejected.
    any_version: bool = False
    # The upstream does not limit the versions: the gateway serves the API for it.
    replaces_upstream: bool = False
    # -- responses ---------------------------------------------------------------------
    # The first version whose response is rewritten; None: responses pass untouched.
    rewritten_from: int | None = None
    mode: Mode = Mode.WHOLE
    # Mode.TAIL: responses from this size on stream through, only their tagged section
    # held back; smaller ones are gathered whole (None: always gathered whole).
    stream_tail_from: int | None = None
    on_response: ResponseHook | None = None
    # -- only looks (see the module docstring) -----------------------------------------
    observes: bool = False

    def __post_init__(self) -> None:
        key = f"api key {self.api_key}"
        rewrites = self.rewritten_from is not None
        if not rewrites and self.mode is not Mode.WHOLE:
            raise ValueError(f"{key}: a response mode needs rewritten_from")
        if self.on_response is not None and not (rewrites or self.observes):
            raise ValueError(f"{key}: on_response needs rewritten_from (or observes)")
        if self.stream_tail_from is not None and self.mode is not Mode.TAIL:
            raise ValueError(f"{key}: stream_tail_from needs Mode.TAIL")
        if self.on_request is None and (self.any_version or self.replaces_upstream):
            raise ValueError(f"{key}: request options need an on_request hook")
        if self.observes and (rewrites or self.any_version or self.replaces_upstream):
            raise ValueError(f"{key}: an observed API is not also changed")
        if self.on_request is None and self.on_response is None and not rewrites:
            raise ValueError(f"{key}: the filter intercepts nothing")
