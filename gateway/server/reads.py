"""Which socket reads a connection has: compiled (``_lane.pyx``) where the scanner is
compiled, else the same interface in Python (``_lane_py.py``), whose reads all take the
readers' way (they call the scanner's twin first).

Either way ``lane.Reads`` is a component of the connection: both sockets' protocols hand
it their reads (``client_read``, ``upstream_read``), it forwards what the scanner takes,
hands the rest to its ``Owner`` and sends what that returns (``send``); a read that
filled the buffer it tells the connection's ``flow.Flow`` (that side yields the loop)."""

from __future__ import annotations

from typing import Protocol

from ..protocol import SCANNER_COMPILED
from .outbox import Outbox

if SCANNER_COMPILED:
    from . import _lane as lane  # type: ignore[attr-defined]
else:
    from . import _lane_py as lane  # type: ignore[no-redef]

# The most one socket read takes, and the unit of work a busy connection side gets per
# turn of the event loop. libuv reads a readable socket again and again in one turn (up
# to 32 times) for as long as each read fills the buffer, so four clients streaming a
# 4.2 MB Metadata response held the loop for up to 10 ms at a time while every other
# connection waited (event-loop lag). A side whose read filled the buffer
# therefore pauses reading and resumes on the loop's next turn (a read that did not
# fill it ends that socket's turn by itself). uvloop reads 256 kB at once into a buffer
# of its own and copies it out; both sides are BufferedProtocols reading into RECV
# instead, for a smaller unit: four connections streaming 100k-partition Metadata, the
# gateway on a CPU of its own (metadata_bench --proxy-cpus 1), had lag p99 1-5 ms with
# 256 kB reads and <= 0.5 ms with 120 kB, at about the same CPU per response. 64 kB
# cost 30 % more CPU per response (twice the reads, sends and yields) for no less lag.
READ_BYTES: int = lane.READ_BYTES
# One receive buffer for every connection of the process: a read is copied out of it
# into ``bytes`` before the next one can start (as uvloop copies out of its own), so no
# connection keeps a buffer of its own. The gateway runs one event loop per process
# (workers are processes), so this is also one buffer per loop, as uvloop's is.
RECV: memoryview = lane.RECV


class Owner(Protocol):
    """What the reads call (``pair.Pair``: the Python path)."""

    def data_received(self, data: bytes) -> Outbox:
        """A client read, or what the scanner left of it: what it gives the sockets."""

    def upstream_data(self, data: bytes) -> Outbox:
        """An upstream read, or what the scanner left of it: what it gives the sockets."""

    def drained(self) -> None:
        """Draining, the scanner took a whole read of responses: close once none is left."""


__all__ = ["READ_BYTES", "RECV", "Owner", "lane"]
