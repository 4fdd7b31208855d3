"""Feature propagation latency: finalize → every gateway serving the new epoch.

Starts a real ZooKeeper, a Tansu broker and N gateways (separate processes, loopback),
then makes ``--changes`` finalized-feature changes (alternately finalizing and
disabling ``eligible.leader.replicas.version``, a feature every gateway supports with
the built-in catalogue) the way ``featurectl`` writes them: a compare-and-set of the
feature znode. For each change it measures the time from just before the write until
every gateway answers ApiVersions v4 with the new FinalizedFeaturesEpoch, polling each
gateway on its own open connection from its own thread.

    .venv/bin/python bench/feature_propagation.py [--gateways 3] [--changes 200]

Prints p50/p90/p99/max over all changes, and per gateway. Target (issue): p99 < 100 ms
on loopback. Exit code 0 when the target is met, 1 when not.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.features.store import FeatureStore, make_client
from tests.harness import GatewayProcess, KafkaConnection, TansuBroker, ZooKeeperProcess
from tests.harness.kafka_wire import parse_features

FEATURE = "eligible.leader.replicas.version"
CHROOT = "/kafka-gateway-bench"
TARGET_P99_S = 0.100


class Poller(threading.Thread):
    """Polls one gateway's ApiVersions until it serves ``want`` epoch; records when."""

    def __init__(self, gw: GatewayProcess) -> None:
        super().__init__(daemon=True, name=f"poll-{gw.name}")
        self.gw = gw
        self.conn = KafkaConnection(gw.host, gw.port, timeout=5)
        self.want = threading.Event()
        self.done = threading.Event()
        self.epoch = -2
        self.seen_at = 0.0
        self.stop = False

    def run(self) -> None:
        while not self.stop:
            if not self.want.wait(0.1):
                continue
            while True:
                epoch = parse_features(self.conn.api_versions(4)).epoch
                if epoch >= self.epoch:
                    self.seen_at = time.perf_counter()
                    break
            self.want.clear()
            self.done.set()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateways", type=int, default=3, help="gateways to start [3]")
    parser.add_argument("--changes", type=int, default=200, help="changes to time [200]")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kgw-propagation-"))
    zk = ZooKeeperProcess(work)
    broker = TansuBroker(work)
    gateways: list[GatewayProcess] = []
    parts = [zk, broker]
    try:
        zk.start()
        broker.start()
        for i in range(args.gateways):
            gw = GatewayProcess(
                work,
                broker.bootstrap,
                name=f"gw-{i}",
                extra_args=[
                    "--zookeeper", zk.connect_string,
                    "--zookeeper-chroot", CHROOT,
                    "--gateway-id", f"gw-{i}",
                    "--log-level", "warning",
                ],
            )  # fmt: skip
            gw.start()
            gateways.append(gw)
            parts.append(gw)
        client = make_client(zk.connect_string)
        client.start(timeout=15)
        store = FeatureStore(client, CHROOT)
        pollers = [Poller(gw) for gw in gateways]
        for poller in pollers:
            poller.start()

        samples: list[float] = []
        per_gateway: dict[str, list[float]] = {gw.name: [] for gw in gateways}
        epoch = store.read().epoch
        for change in range(args.changes):
            levels = {FEATURE: 1} if change % 2 == 0 else {}
            started = time.perf_counter()
            epoch = store.write(levels, epoch)
            for poller in pollers:
                poller.epoch = epoch
                poller.done.clear()
                poller.want.set()
            for poller in pollers:
                if not poller.done.wait(10):
                    raise SystemExit(f"{poller.gw.name} did not serve epoch {epoch} in 10 s")
            for poller in pollers:
                per_gateway[poller.gw.name].append(poller.seen_at - started)
            samples.append(max(p.seen_at for p in pollers) - started)
        for poller in pollers:
            poller.stop = True
        client.stop()
        client.close()
    finally:
        for part in reversed(parts):
            part.stop()

    ms = [s * 1000 for s in samples]
    print(f"feature propagation: {len(ms)} changes, {args.gateways} gateways, loopback")
    print(
        f"  all gateways serving the new epoch: p50 {percentile(ms, 0.5):.1f} ms  "
        f"p90 {percentile(ms, 0.9):.1f} ms  p99 {percentile(ms, 0.99):.1f} ms  "
        f"max {max(ms):.1f} ms  mean {statistics.mean(ms):.1f} ms"
    )
    for name, values in per_gateway.items():
        each = [v * 1000 for v in values]
        print(f"  {name}: p50 {percentile(each, 0.5):.1f} ms  p99 {percentile(each, 0.99):.1f} ms")
    met = percentile(samples, 0.99) < TARGET_P99_S
    print(f"  target p99 < {TARGET_P99_S * 1000:.0f} ms: {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
