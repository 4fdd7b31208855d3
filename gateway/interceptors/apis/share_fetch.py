"""ShareFetch (KIP-932): its NodeEndpoints rewritten to gateway addresses, every version."""

from ..filter import Filter

SHARE_FETCH = 78

FILTER = Filter(SHARE_FETCH, rewritten_from=0)
