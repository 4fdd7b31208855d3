"""An upstream whose answer changes reaches live connections, as a level drop does.

What a connection may use is fixed when it opens: the gateway's own versions ∩ its
upstream's ApiVersions ∩ what the finalized levels allow, those levels lowered to the
broker's own where the broker has the feature (``features.report.enforced_levels``). The
upstream's half can change under a live connection without the connection closing:
``kafka-features.sh downgrade --feature transaction.version=0`` run against the brokers
changes what each one reports in ApiVersions at once (Apache Kafka 4.4: finalized
features and epoch, 14 → 25, while its version ranges stay), and a new connection is
then offered less than the live ones were. Left alone, a live client keeps the versions
it was told until it happens to reconnect.

So every ``upstream_api_versions_check_ms``, each process asks again, for one live
connection per upstream address chosen at random, that connection's own upstream
ApiVersions, on its own socket, between two requests. If that broker's answer changed,
every connection to the address is asked in the same way, each one's new ranges are
worked out from its own broker's answer, and those that lost a version are drained
(``withdrawn.drain``: in-flight requests answered, then closed; the client reconnects and
renegotiates). Each compares its own broker's answers, never another's: behind a
load-balanced bootstrap address brokers of mixed versions answer differently, and a
connection must keep what its own broker offers (a probe of the address would drain the
wrong clients).

A request of the gateway's own may only go between two of the client's, and never into
a SASL exchange: Kafka closes a connection that sends anything but SaslAuthenticate
while it authenticates. A connection is asked only when one of its client's requests
other than SASL's is in flight (so the client is past authenticating and not
re-authenticating, KIP-368: a client sends nothing else meanwhile) and none of SASL's,
and its reader is at a frame boundary. One that is not is looked at again every
``_RETRY_S`` for ``_PATIENCE_S`` (a busy one is ready within milliseconds), then at each
check after that (an idle one, until it sends something or closes).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..config import HostPort
from ..features.report import FeatureReport
from ..interceptors import dispatch
from ..observability.logging import get_logger
from ..protocol import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from ..versions import VersionRange
from .withdrawn import UPSTREAM_ANSWER, describe, drain, withdrawn

if TYPE_CHECKING:
    from .proxy import ClientConnection
    from .services import GatewayServices

log = get_logger("gateway.upstream_recheck")

# How often a connection waiting for its turn is looked at again, and for how long
# before it waits for the next check instead.
_RETRY_S = 0.05
_PATIENCE_S = 1.0
_NOT_BETWEEN = frozenset((API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE))
_SASL = (SASL_HANDSHAKE, SASL_AUTHENTICATE)


def may_ask(conn: ClientConnection) -> bool:
    """Whether a request of the gateway's own may go to ``conn``'s upstream now."""
    if conn.closed or conn.draining or conn.ranges is None:  # ranges: upstream answered
        return False
    requests = conn.requests
    if requests.mid_frame or requests.held or conn.inflight.sasl.state:
        return False
    keys = [entry.api_key for entry in conn.inflight.entries]
    return any(key not in _NOT_BETWEEN for key in keys) and not any(k in _SASL for k in keys)


def adopt(
    gateway: GatewayServices,
    conn: ClientConnection,
    ranges: dict[int, VersionRange],
    features: FeatureReport,
) -> dict[int, VersionRange]:
    """Renegotiate ``conn`` with its upstream's new answer; the versions it lost."""
    before = conn.ranges
    conn.upstream_ranges = gateway.negotiated(conn.upstream_address, ranges, features).upstream
    conn.upstream_features = features
    conn.renegotiate()
    if before is None or conn.ranges is None:
        return {}
    return withdrawn(before, conn.ranges)


class UpstreamRecheck:
    """Asks live connections' upstreams ApiVersions again (see the module docstring)."""

    def __init__(
        self,
        gateway: GatewayServices,
        connections: Callable[[], Iterable[ClientConnection]],
        interval_s: float,
    ) -> None:
        self._gateway = gateway
        self._connections = connections
        self.interval_s = interval_s
        # Connections to ask, waiting for a moment they may be asked: → (sweep if their
        # answer changed, since when); those past _PATIENCE_S wait for the next check.
        self._waiting: dict[ClientConnection, tuple[bool, float]] = {}
        self._idle: dict[ClientConnection, bool] = {}
        self._retry: asyncio.TimerHandle | None = None

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.sample()

    def sample(self) -> None:
        """Ask one live connection per upstream address, chosen at random (and those
        that were waiting too long for their turn)."""
        idle, self._idle = self._idle, {}
        for conn, sweep in idle.items():
            self.ask(conn, sweep=sweep)
        by_address: dict[HostPort, list[ClientConnection]] = {}
        for conn in self._connections():
            if conn.ranges is not None and not conn.closed and not conn.draining:
                by_address.setdefault(conn.upstream_address, []).append(conn)
        for conns in by_address.values():
            self.ask(random.choice(conns), sweep=True)

    def sweep(self, address: HostPort, asked: ClientConnection) -> None:
        """``asked``'s broker answered differently: ask every connection to ``address``."""
        for conn in list(self._connections()):
            if conn is not asked and conn.upstream_address == address and conn.ranges is not None:
                self.ask(conn, sweep=False)

    def ask(self, conn: ClientConnection, *, sweep: bool) -> None:
        """Ask ``conn``'s upstream ApiVersions now, or as soon as it may be asked."""
        if not may_ask(conn):
            if not conn.closed and not conn.draining:
                loop = asyncio.get_running_loop()
                was_sweep, since = self._waiting.get(conn, (False, loop.time()))
                self._waiting[conn] = (was_sweep or sweep, since)
                if self._retry is None:
                    self._retry = loop.call_later(_RETRY_S, self._again)
            return
        upstream = conn.upstream_address
        was = (dict(conn.upstream_ranges), conn.upstream_features.shape())

        def answered(ranges: dict[int, VersionRange], features: FeatureReport) -> None:
            if conn.closed or conn.draining:
                return
            if (ranges, features.shape()) == was:  # at most a newer epoch: its client
                conn.upstream_features = features  # is told that one from now on
                conn.feature_report = self._gateway.feature_report(features)
                return
            lost = adopt(self._gateway, conn, ranges, features)
            if lost:
                drain(self._gateway, conn, lost, UPSTREAM_ANSWER)
            if sweep:
                log.info(
                    "upstream.answer_changed",
                    upstream=str(upstream),
                    withdrawn=describe(lost),
                    action="asking every connection to it again; those that lost a "
                    "version are drained",
                )
                self.sweep(upstream, conn)

        dispatch.ask_upstream_versions(conn.exchange, answered)

    def _again(self) -> None:
        self._retry = None
        waiting, self._waiting = self._waiting, {}
        now = asyncio.get_running_loop().time()
        for conn, (sweep, since) in waiting.items():
            if now - since >= _PATIENCE_S:
                self._idle[conn] = self._idle.get(conn, False) or sweep
                continue
            self.ask(conn, sweep=sweep)
            if conn in self._waiting:
                self._waiting[conn] = (self._waiting[conn][0], since)
