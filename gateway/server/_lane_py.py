"""``gateway/server/_lane.pyx``'s interface without the lane: every read takes the Python
path. What runs where the lane was not compiled (no C compiler at install time), or with
``KAFKA_GATEWAY_PURE_PYTHON=1`` in the environment (see ``gateway/server/proxy.py``).
"""

from __future__ import annotations

from typing import Any

COMPILED = False

# The most one socket read takes (see gateway/server/proxy.py, READ_BYTES).
READ_BYTES = 120_000
# One receive buffer for every connection of the process (see proxy.py).
RECV = memoryview(bytearray(READ_BYTES))


class PlainTable:
    """What the lane may take: nothing, here."""

    __slots__ = ()

    def __init__(
        self,
        passthrough: object,
        first_rewritten: object,
        walks: object,
        headed: object,
        heads: object,
        book: object,
    ) -> None:
        pass

    def plain(self, key: int, version: int) -> bool:
        return False

    def walked(self, key: int, version: int) -> bool:
        return False

    def headed(self, key: int, version: int) -> bool:
        return False


class Lane:
    """Base of ``ClientConnection``: the attributes the compiled lane keeps in C, and
    every read handed to the Python path."""

    __slots__ = (
        "budget_on",
        "bytes_in",
        "bytes_out",
        "charged",
        "client",
        "draining",
        "inflight",
        "lane_frames",
        "lane_requests",
        "lane_responses",
        "lane_table",
        "limits",
        "log_sampled",
        "max_frame_bytes",
        "requests",
        "responses",
        "upstream",
    )

    lane_in_flight = 0

    # Defined by ClientConnection.
    data_received: Any
    read_filled_client: Any

    def get_buffer(self, sizehint: int) -> memoryview:
        return RECV

    def buffer_updated(self, nbytes: int) -> None:
        if nbytes == READ_BYTES:
            self.read_filled_client()
        self.data_received(RECV[:nbytes].tobytes())

    def lane_spill(self) -> None:
        pass

    def lane_absorb(self, entries: object) -> bool:
        return False

    def lane_fold(self, stats: object) -> None:
        pass


class UpstreamLane:
    """Base of ``UpstreamConnection``: hands each read to its pair."""

    __slots__ = ("pair",)

    def __init__(self, pair: Any) -> None:
        self.pair = pair

    def get_buffer(self, sizehint: int) -> memoryview:
        return RECV

    def buffer_updated(self, nbytes: int) -> None:
        if nbytes == READ_BYTES:
            self.pair.read_filled_upstream()
        self.pair.upstream_data(RECV[:nbytes].tobytes())
