"""The filter registry: every intercepted API's declaration, and the tables derived from them.

Each module of ``gateway.interceptors.apis`` declares one ``Filter`` (its API key,
the versions and part of its responses that are rewritten, the requests it answers;
see ``gateway.interceptors.filter``) as its module-level ``FILTER``. This module finds
them all (a new intercepted API is one new file there) and computes what the runtime
asks by key, so nothing below is kept by hand:

* ``REWRITTEN_FROM``: api key → the first version whose response is rewritten, the
  response reader's one lookup per response and the compiled lane's table of plain
  requests (everything else passes opaque);
* ``HEAD_REWRITTEN``/``TAIL_REWRITTEN``: the keys whose rewritten responses the compiled
  lane may head-replace or walk itself; ``STREAMED_TAILS``: from which size a tail-mode
  response streams with only its tagged section held;
* ``REQUESTS``: the filters that answer requests (which keys a connection never
  forwards, which the gateway serves for the upstream); ``RESPONSE_EXTRAS``: what is
  added to a whole rewritten body;
* ``DECODED``: api key → the first version the gateway decodes either way, whose schemas
  the fork server loads once for every worker;
* ``SEES_REQUESTS``/``SEES_RESPONSES``: the hooks of observed APIs, whose frames pass
  unchanged; ``RESPONSES_FROM``: api key → the first version whose response the response
  reader hands to the interceptors (rewritten or observed).

``gateway.interceptors.dispatch`` applies these tables to a connection's frames.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType

from . import apis
from .filter import Filter, Mode, RequestHook, ResponseHook, ResponseObserver


def discover(package: ModuleType) -> list[Filter]:
    """The ``FILTER`` of each module of ``package``, by api key; a module whose name
    starts with ``_`` is a helper, not an API."""
    filters: dict[int, Filter] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        declared = getattr(module, "FILTER", None)
        if not isinstance(declared, Filter):
            raise TypeError(f"{module.__name__} declares no FILTER (a Filter)")
        if declared.api_key in filters:
            raise ValueError(f"api key {declared.api_key} is declared twice ({module.__name__})")
        filters[declared.api_key] = declared
    return [filters[key] for key in sorted(filters)]


@dataclass(frozen=True)
class Registry:
    """The tables derived from a set of filters (see the module docstring)."""

    filters: Mapping[int, Filter]
    rewritten_from: Mapping[int, int]
    head_rewritten: tuple[int, ...]
    tail_rewritten: tuple[int, ...]
    streamed_tails: Mapping[int, int]
    requests: Mapping[int, Filter]
    response_extras: Mapping[int, ResponseHook]
    decoded: Mapping[int, int]
    sees_requests: Mapping[int, RequestHook]
    sees_responses: Mapping[int, ResponseObserver]
    responses_from: Mapping[int, int]


def derive(filters: Iterable[Filter]) -> Registry:
    by_key = {f.api_key: f for f in filters}
    rewritten = {k: f.rewritten_from for k, f in by_key.items() if f.rewritten_from is not None}
    requests = {k: f for k, f in by_key.items() if f.answer is not None}
    decoded = dict(rewritten)
    for key in requests:
        decoded[key] = 0  # an answered request is decoded from its first version
    sees_requests = {k: f.sees_request for k, f in by_key.items() if f.sees_request is not None}
    sees_responses = {k: f.sees_response for k, f in by_key.items() if f.sees_response is not None}
    # Plain dicts, typed read-only: the response reader binds ``rewritten_from.get``, the
    # compiled lane reads it once per negotiated table, and the others are looked up
    # once per intercepted frame, where a mapping proxy's indirection would cost.
    return Registry(
        filters=by_key,
        rewritten_from=rewritten,
        head_rewritten=tuple(k for k in rewritten if by_key[k].mode is Mode.HEAD),
        tail_rewritten=tuple(k for k in rewritten if by_key[k].mode is Mode.TAIL),
        streamed_tails={
            k: f.stream_tail_from for k, f in by_key.items() if f.stream_tail_from is not None
        },
        requests=requests,
        response_extras={
            k: f.after_rewrite for k, f in by_key.items() if f.after_rewrite is not None
        },
        decoded=decoded,
        sees_requests=sees_requests,
        sees_responses=sees_responses,
        responses_from={**rewritten, **dict.fromkeys(sees_responses, 0)},
    )


REGISTRY = derive(discover(apis))

FILTERS = REGISTRY.filters
REWRITTEN_FROM = REGISTRY.rewritten_from
HEAD_REWRITTEN = REGISTRY.head_rewritten
TAIL_REWRITTEN = REGISTRY.tail_rewritten
STREAMED_TAILS = REGISTRY.streamed_tails
REQUESTS = REGISTRY.requests
RESPONSE_EXTRAS = REGISTRY.response_extras
DECODED = REGISTRY.decoded
SEES_REQUESTS = REGISTRY.sees_requests
SEES_RESPONSES = REGISTRY.sees_responses
RESPONSES_FROM = REGISTRY.responses_from
