"""The filter registry: every intercepted API's declaration, and the tables derived from them.

Each module of ``gateway.interceptors.apis`` declares one ``Filter`` (its API key, its
hooks, the versions and part of its responses that are rewritten; see
``gateway.interceptors.filter``) as its module-level ``FILTER``. This module finds them
all (a new intercepted API is one new file there) and computes what the runtime asks by
key, so nothing below is kept by hand:

* ``REWRITTEN_FROM``: api key → the first version whose response is rewritten, the
  response reader's one lookup per response and the compiled lane's table of plain
  requests (everything else passes opaque);
* ``HEAD_REWRITTEN``/``TAIL_REWRITTEN``: the keys whose rewritten responses the compiled
  lane may head-replace or walk itself; ``STREAMED_TAILS``: from which size a tail-mode
  response streams with only its tagged section held;
* ``REQUESTS``: the filters with a request hook (which keys a connection holds back,
  which the gateway serves for the upstream); ``RESPONSE_HOOKS``: the response hooks;
* ``DECODED``: api key → the first version the gateway decodes with the codec, whose
  schemas the fork server loads once for every worker (an observed API's frames are
  not decoded); ``RESPONSES_FROM``: api key → the first version whose response the
  response reader hands to the interceptors (rewritten, or shown to a hook).

``gateway.interceptors.dispatch`` applies these tables to a connection's frames.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType

from .. import declared
from . import apis
from .filter import Filter, Mode, ResponseHook


def discover(package: ModuleType) -> list[Filter]:
    """The ``FILTER`` of each module of ``package``, by api key."""
    return declared.discover(package, "FILTER", Filter)


@dataclass(frozen=True)
class Registry:
    """The tables derived from a set of filters (see the module docstring)."""

    filters: Mapping[int, Filter]
    rewritten_from: Mapping[int, int]
    head_rewritten: tuple[int, ...]
    tail_rewritten: tuple[int, ...]
    streamed_tails: Mapping[int, int]
    requests: Mapping[int, Filter]
    response_hooks: Mapping[int, ResponseHook]
    decoded: Mapping[int, int]
    responses_from: Mapping[int, int]


def derive(filters: Iterable[Filter]) -> Registry:
    by_key = {f.api_key: f for f in filters}
    rewritten = {k: f.rewritten_from for k, f in by_key.items() if f.rewritten_from is not None}
    requests = {k: f for k, f in by_key.items() if f.on_request is not None}
    decoded = dict(rewritten)
    for key, hooked in requests.items():
        if not hooked.observes:
            decoded[key] = 0  # a request a hook changes is decoded from its first version
    hooks = {k: f.on_response for k, f in by_key.items() if f.on_response is not None}
    observed = {k: 0 for k, f in by_key.items() if f.observes and f.on_response is not None}
    # Plain dicts, typed read-only: the response reader binds ``responses_from.get``, the
    # compiled lane reads ``rewritten_from`` once per negotiated table, and the others
    # are looked up once per intercepted frame, where a mapping proxy's indirection
    # would cost.
    return Registry(
        filters=by_key,
        rewritten_from=rewritten,
        head_rewritten=tuple(k for k in rewritten if by_key[k].mode is Mode.HEAD),
        tail_rewritten=tuple(k for k in rewritten if by_key[k].mode is Mode.TAIL),
        streamed_tails={
            k: f.stream_tail_from for k, f in by_key.items() if f.stream_tail_from is not None
        },
        requests=requests,
        response_hooks=hooks,
        decoded=decoded,
        responses_from={**rewritten, **observed},
    )


REGISTRY = derive(discover(apis))

FILTERS = REGISTRY.filters
REWRITTEN_FROM = REGISTRY.rewritten_from
HEAD_REWRITTEN = REGISTRY.head_rewritten
TAIL_REWRITTEN = REGISTRY.tail_rewritten
STREAMED_TAILS = REGISTRY.streamed_tails
REQUESTS = REGISTRY.requests
RESPONSE_HOOKS = REGISTRY.response_hooks
DECODED = REGISTRY.decoded
RESPONSES_FROM = REGISTRY.responses_from
