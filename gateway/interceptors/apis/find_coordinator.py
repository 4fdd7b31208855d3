"""FindCoordinator: the coordinator's address (v0-3) or each coordinator's (v4+, batched)
rewritten to gateway addresses; the response is bounded by the keys asked for, so it is
gathered whole."""

from ...protocol import FIND_COORDINATOR
from ..filter import Filter

FILTER = Filter(FIND_COORDINATOR, rewritten_from=0)
