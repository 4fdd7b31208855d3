"""ShareAcknowledge (KIP-932): its NodeEndpoints rewritten to gateway addresses, every
version."""

from ..filter import Filter

SHARE_ACKNOWLEDGE = 79

FILTER = Filter(SHARE_ACKNOWLEDGE, rewritten_from=0)
