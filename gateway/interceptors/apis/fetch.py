"""Fetch: KIP-951's NodeEndpoints (v16+) rewritten, as for Produce (``Mode.TAIL``).

A large Fetch streams through: only its tagged section is held back, so a bulk consumer
does not wait for the gateway to gather each response before the first byte reaches
it. Smaller ones are gathered whole, which leaves a rewrite free to change their length.
"""

from ...protocol import FETCH
from ..filter import Filter, Mode

STREAM_FROM_BYTES = 64 * 1024

FILTER = Filter(FETCH, rewritten_from=16, mode=Mode.TAIL, stream_tail_from=STREAM_FROM_BYTES)
