"""Broker address rewriting by API key, as the filters declare it: sans-I/O.

Every response that names a broker's host and port is rewritten, so clients always come
back through a gateway: Metadata (brokers), FindCoordinator (v0-3 single coordinator, v4+
batched), DescribeCluster (brokers), and KIP-951's NodeEndpoints in Produce (v10+),
Fetch (v16+), ShareFetch and ShareAcknowledge. Which API from which version, and which
part of its response holds the endpoints, is each API's ``Filter``
(``gateway.interceptors.apis``); the tables here are the registry's, and the rewriting
itself is ``gateway.interceptors.endpoints``'s, picked by the filter's mode.
"""

from __future__ import annotations

from ..protocol import HeadFinder
from . import endpoints, registry
from .endpoints import (
    LAST_HEADS,
    NODE_ENDPOINTS_TAG,
    PAD_TAGS,
    AddressBook,
    LastHead,
    TailRewrite,
    rewrite_head,
    rewrite_tail,
)

# api key → the first version whose response carries broker addresses.
REWRITTEN_RESPONSES = registry.REWRITTEN_FROM
# The keys whose only rewritten part is the body's top-level tagged section.
TAIL_REWRITTEN = registry.TAIL_REWRITTEN
# The keys whose endpoints all sit in a head that streams before the bulk of the body.
HEAD_REWRITTEN = registry.HEAD_REWRITTEN


def rewrite_response(
    api_key: int, api_version: int, body: bytes | memoryview, book: AddressBook
) -> bytes | memoryview:
    """Return the response body with every broker endpoint replaced by its gateway address.

    When nothing needs to change, ``body`` itself is returned (not a copy), so a caller
    can forward the frame it already holds.
    """
    if api_key in TAIL_REWRITTEN:
        return endpoints.rewrite_after_tags(api_key, api_version, body, book)
    return endpoints.rewrite_whole(api_key, api_version, body, book)


def head_finder(api_key: int, api_version: int) -> HeadFinder | None:
    """A finder for the head of a response that streams after its endpoints, if its
    filter says so (``Mode.HEAD``); None when it is gathered whole."""
    if api_key not in HEAD_REWRITTEN:
        return None
    return endpoints.head_finder(api_key, api_version)


__all__ = [
    "HEAD_REWRITTEN",
    "LAST_HEADS",
    "NODE_ENDPOINTS_TAG",
    "PAD_TAGS",
    "REWRITTEN_RESPONSES",
    "TAIL_REWRITTEN",
    "AddressBook",
    "LastHead",
    "TailRewrite",
    "head_finder",
    "rewrite_head",
    "rewrite_response",
    "rewrite_tail",
]
