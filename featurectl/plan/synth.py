"""A synthetic metrics dataset in ``featurectl collect``'s layout, for tests and benchmarks.

The fleet tells a story the planner must get right:

* ``old_gateways`` gateways front brokers without transaction.version 2 and share.version
  1 (their registrations say 0-1 and 0), so those targets are blocked until upgraded;
* librdkafka 2.6.1 and apache-kafka-java 4.0.0 use ConsumerGroupHeartbeat, which needs
  the finalized group.version=1: disabling it is unsafe;
* apache-kafka-java 3.7.0 used ConsumerGroupDescribe (group.version=1) during the first
  tenth of the window only: it has a last-seen time, and no increase after it;
* librdkafka 2.3.0 is replaced by 2.6.1 during the window (connections move over), and
  2.6.1 appears only after the first third (newborn series);
* gateway 1 restarts at 60 % of the window (every counter resets to 0);
* refusals (``REFUSED``): kafka-python 1.4.7, pinned to api_version (0,10), is refused
  every Produce v2 (unsupported_version: broken now, and the remedy is the library, not a
  level); a Kafka Streams 4.1.0 app is refused StreamsGroupHeartbeat from mid-window
  (gated_by_feature: it wants streams.version=1). The old gateways are an older build
  whose refusal counter has only a ``reason`` label (the plan must say it cannot tell
  who); the others label refusals by API and client.

``python -m featurectl.plan.synth --out DIR --samples 10000000`` writes about 10 million
samples (one ``.prom`` file per gateway per scrape); ``generate()`` is the library call.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from gateway.features.znode import Finalized, Registration
from gateway.wire import api_spec

from .columnar import SampleSink
from .layout import ScrapeMeta, StateSnapshot, TextSink, epoch_ms, stamp, write_state
from .synth_fleet import (
    CLIENTS,
    FINALIZED,
    LATENCY_BOUNDS,
    LISTENERS,
    REFUSED,
    REJECT_REASONS,
    START,
    ClientProfile,
    activity,
    client_id,
    support,
)

MANIFEST = "synth.json"


@dataclass(frozen=True)
class SynthSpec:
    gateways: int = 24
    scrapes: int = 240
    interval_s: int = 15
    old_gateways: int = 3
    # The gateway (index) that restarts at ``restart_at`` of the window.
    restart_gateway: int = 1
    restart_at: float = 0.6
    seed: int = 7
    start: str = START.isoformat()
    # "text" (one .prom file per scrape) or "parquet" (what featurectl collect writes).
    format: str = "text"
    clients: tuple[str, ...] = field(default_factory=lambda: tuple(client_id(c) for c in CLIENTS))


@dataclass(frozen=True)
class SynthSummary:
    spec: SynthSpec
    samples: int
    files: int
    bytes: int
    seconds: float


def samples_per_round(spec: SynthSpec, probes: int = 21) -> float:
    """The mean number of samples one round of the fleet writes (measured, not guessed).

    Clients come and go during the window, so a round's size varies; this prints the
    fleet at ``probes`` evenly spaced points of the window and averages.
    """
    rng = random.Random(spec.seed)
    fleet = [_Gateway(i, spec, random.Random(rng.random())) for i in range(spec.gateways)]
    total = 0
    for n in range(probes):
        total += sum(gw.scrape(n / (probes - 1))[1] for gw in fleet)
    return total / probes


def spec_for_samples(samples: int, gateways: int = 24, format: str = "text") -> SynthSpec:
    """A spec whose dataset holds at least ``samples`` samples (2 % margin)."""
    per_round = samples_per_round(SynthSpec(gateways=gateways))
    scrapes = max(2, math.ceil(samples * 1.02 / per_round))
    return SynthSpec(gateways=gateways, scrapes=scrapes, format=format)


def _gateway_id(index: int) -> str:
    return f"gw-{index:03d}.example:9092"


def _format_labels(pairs: Sequence[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"


class _Gateway:
    """The counters of one synthetic gateway and how to print a scrape of them."""

    def __init__(self, index: int, spec: SynthSpec, rng: random.Random) -> None:
        self.index = index
        self.id = _gateway_id(index)
        self.spec = spec
        self.rng = rng
        self.support = support(old=index < spec.old_gateways)
        # Not every client runs against every gateway.
        self.clients = [c for c in CLIENTS if rng.random() < 0.85 or c.name == "librdkafka"]
        self.scale = rng.uniform(0.5, 1.5)
        self.requests: dict[str, float] = {}
        # (labels text, api name, client, api_key, api_version, rate)
        self.series: list[tuple[str, str, ClientProfile, int, int, float]] = []
        for listener in LISTENERS:
            for client in self.clients:
                for key, version, rate in client.usage:
                    found = api_spec(key)
                    api = found.name if found else "Unknown"
                    labels = _format_labels(
                        (
                            ("listener", listener),
                            ("api_key", str(key)),
                            ("api", api),
                            ("api_version", str(version)),
                            ("client_software_name", client.name),
                            ("client_software_version", client.version),
                        )
                    )
                    self.series.append((labels, api, client, key, version, rate))
        self.counts = [0.0] * len(self.series)
        self.latency: dict[str, list[float]] = {}
        self.rejected = [0] * len(REJECT_REASONS)
        # Older builds label refusals by reason only.
        self.labelled_refusals = index >= spec.old_gateways
        self.refused = [0.0] * len(REFUSED)

    def restart(self) -> None:
        self.counts = [0.0] * len(self.series)
        self.latency = {}
        self.rejected = [0] * len(REJECT_REASONS)
        self.refused = [0.0] * len(REFUSED)

    def scrape(self, fraction: float) -> tuple[str, int]:
        """The exposition text at this point of the window and its number of samples."""
        rng, interval = self.rng, self.spec.interval_s
        out: list[str] = [
            "# HELP kafka_gateway_info kafka-gateway build and upstream",
            "# TYPE kafka_gateway_info gauge",
            "kafka_gateway_info"
            + _format_labels(
                (
                    ("gateway_id", self.id),
                    ("gateway_version", "0.1.0"),
                    ("broker_software_name", "apache-kafka"),
                    (
                        "broker_software_version",
                        "3.7" if self.index < self.spec.old_gateways else "4.0",
                    ),
                    ("upstream", f"broker-{self.index}:9093"),
                    # The old gateways' protocol data predates Kafka 4 (plan --release).
                    (
                        "protocol_kafka",
                        "3.9.2" if self.index < self.spec.old_gateways else "4.4.0",
                    ),
                )
            )
            + " 1.0",
            "# TYPE kafka_gateway_requests_total counter",
        ]
        responses: list[str] = ["# TYPE kafka_gateway_responses_total counter"]
        latency_counts: dict[str, float] = {}
        for i, (labels, api, client, key, version, rate) in enumerate(self.series):
            live = activity(client, fraction)
            for stop_key, stop_version, until in client.stops:
                if (key, version) == (stop_key, stop_version) and fraction > until:
                    live = 0.0
            if live == 0.0 and self.counts[i] == 0.0:
                continue  # a series the gateway has not created yet
            added = rate * client.connections * live * self.scale * interval
            self.counts[i] += float(int(added * rng.uniform(0.8, 1.2) + 0.5))
            count = self.counts[i]
            out.append(f"kafka_gateway_requests_total{labels} {count}")
            responses.append(f"kafka_gateway_responses_total{labels} {count}")
            latency_counts[api] = latency_counts.get(api, 0.0) + count
        out += responses
        out.append("# TYPE kafka_gateway_request_latency_seconds histogram")
        for api, total in sorted(latency_counts.items()):
            for bound in LATENCY_BOUNDS:
                cumulative = total * min(1.0, 0.2 + bound * 8)
                out.append(
                    f'kafka_gateway_request_latency_seconds_bucket{{api="{api}",le="{bound}"}} '
                    f"{float(int(cumulative))}"
                )
            out.append(
                f'kafka_gateway_request_latency_seconds_bucket{{api="{api}",le="+Inf"}} {total}'
            )
            out.append(f'kafka_gateway_request_latency_seconds_count{{api="{api}"}} {total}')
            out.append(f'kafka_gateway_request_latency_seconds_sum{{api="{api}"}} {total * 0.004}')
        out.append("# TYPE kafka_gateway_connections_active gauge")
        for listener in LISTENERS:
            for client in self.clients:
                live = activity(client, fraction)
                n = round(client.connections * live * self.scale / len(LISTENERS))
                out.append(
                    "kafka_gateway_connections_active"
                    + _format_labels(
                        (
                            ("listener", listener),
                            ("client_software_name", client.name),
                            ("client_software_version", client.version),
                        )
                    )
                    + f" {float(n)}"
                )
        out.append("# TYPE kafka_gateway_rejected_requests_total counter")
        for i, reason in enumerate(REJECT_REASONS):
            self.rejected[i] += rng.random() < 0.01
            labels: tuple[tuple[str, str], ...] = (("reason", reason),)
            if self.labelled_refusals and reason not in ("oversize_frame", "unknown_api_key"):
                continue  # a newer build names the API and client of these (REFUSED)
            if self.labelled_refusals:
                # Frames refused before their header was read: no API, no client.
                labels = (
                    ("listener", LISTENERS[0]),
                    ("reason", reason),
                    ("api_key", "-1"),
                    ("api", "Unknown"),
                    ("api_version", "-1"),
                    ("client_software_name", "unknown"),
                    ("client_software_version", "unknown"),
                )
            out.append(
                f"kafka_gateway_rejected_requests_total{_format_labels(labels)} "
                f"{float(self.rejected[i])}"
            )
        for i, (name, version, key, api_version, reason, rate, start) in enumerate(REFUSED):
            if not self.labelled_refusals or (fraction < start and self.refused[i] == 0.0):
                continue
            if fraction >= start:
                self.refused[i] += float(round(rate * self.scale * interval))
            found = api_spec(key)
            labels = (
                ("listener", LISTENERS[0]),
                ("reason", reason),
                ("api_key", str(key)),
                ("api", found.name if found else "Unknown"),
                ("api_version", str(api_version)),
                ("client_software_name", name),
                ("client_software_version", version),
            )
            out.append(
                f"kafka_gateway_rejected_requests_total{_format_labels(labels)} {self.refused[i]}"
            )
        out.append("# TYPE kafka_gateway_feature_finalized_level gauge")
        for name, level in sorted(FINALIZED.items()):
            out.append(f'kafka_gateway_feature_finalized_level{{feature="{name}"}} {float(level)}')
        out.append(f"kafka_gateway_feature_finalized_epoch {float(len(FINALIZED))}")
        for bound, pick in (("min", 0), ("max", 1)):
            out.append(f"# TYPE kafka_gateway_feature_supported_{bound}_level gauge")
            for name, rng_ in sorted(self.support.items()):
                out.append(
                    f'kafka_gateway_feature_supported_{bound}_level{{feature="{name}"}} '
                    f"{float(rng_[pick])}"
                )
        samples = sum(1 for line in out if line[0] != "#")
        return "\n".join(out) + "\n", samples

    def registration(self) -> Registration:
        return Registration(
            gateway_id=self.id,
            listener=self.id,
            upstream=f"broker-{self.index}:9093",
            features=self.support,
            metrics_url=f"http://gw-{self.index:03d}.example:9404/metrics",
            broker_software_name="apache-kafka",
            broker_software_version="3.7" if self.index < self.spec.old_gateways else "4.0",
            gateway_version="0.1.0",
        )


def generate(out: Path, spec: SynthSpec, *, progress: bool = False) -> SynthSummary:
    """Write the dataset; counts every sample line written."""
    started = time.perf_counter()
    rng = random.Random(spec.seed)
    gateways = [_Gateway(i, spec, random.Random(rng.random())) for i in range(spec.gateways)]
    start = datetime.fromisoformat(spec.start)
    samples = files = size = 0
    restart_scrape = int(spec.scrapes * spec.restart_at)
    sink = SampleSink(out) if spec.format == "parquet" else TextSink(out)
    for n in range(spec.scrapes):
        when = start + timedelta(seconds=n * spec.interval_s)
        fraction = n / max(1, spec.scrapes - 1)
        writer = sink.round(stamp(when))
        for gw in gateways:
            if gw.index == spec.restart_gateway and n == restart_scrape:
                gw.restart()
            text, count = gw.scrape(fraction)
            meta = ScrapeMeta(
                gw.id, f"http://{gw.id.split(':')[0]}:9404/metrics", epoch_ms(when), "synthetic"
            )
            writer.write(meta, text)
            samples += count
            files += 1
            size += len(text)
        if progress and n % max(1, spec.scrapes // 10) == 0:
            print(f"  scrape {n + 1}/{spec.scrapes}: {samples:,} samples", file=sys.stderr)
    sink.flush()
    if isinstance(sink, SampleSink):
        files, size = len(sink.written), sum(p.stat().st_size for p in sink.written)
    end = start + timedelta(seconds=(spec.scrapes - 1) * spec.interval_s)
    write_state(
        out,
        StateSnapshot(
            time_ms=epoch_ms(end),
            finalized=Finalized(dict(FINALIZED), len(FINALIZED)),
            registrations=tuple(gw.registration() for gw in gateways),
            zookeeper="zk-0.example:2181",
            chroot="/kafka-gateway",
        ),
    )
    summary = SynthSummary(spec, samples, files, size, round(time.perf_counter() - started, 3))
    (out / MANIFEST).write_text(json.dumps(asdict(summary), indent=1) + "\n")
    return summary


def existing(out: Path, spec: SynthSpec) -> SynthSummary | None:
    """The summary of a dataset already generated with ``spec`` in ``out``, if any."""
    try:
        doc = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    stored = doc.get("spec", {})
    stored["clients"] = tuple(stored.get("clients", ()))
    if stored != asdict(spec) | {"clients": tuple(spec.clients)}:
        return None
    return SynthSummary(spec, doc["samples"], doc["files"], doc["bytes"], doc["seconds"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m featurectl.plan.synth",
        description="Write a synthetic kafka-gateway metrics dataset (featurectl collect's "
        "layout) for tests and benchmarks.",
        epilog="example: python -m featurectl.plan.synth --out /tmp/synth --samples 10000000",
    )
    parser.add_argument("--out", required=True, type=Path, metavar="DIR")
    parser.add_argument(
        "--samples", type=int, default=1_000_000, help="about this many samples [1000000]"
    )
    parser.add_argument("--gateways", type=int, default=24, help="gateways in the fleet [24]")
    parser.add_argument(
        "--format", choices=("text", "parquet"), default="text", help="dataset format [text]"
    )
    args = parser.parse_args(argv)
    spec = spec_for_samples(args.samples, args.gateways, args.format)
    summary = generate(args.out, spec, progress=True)
    print(
        f"{summary.samples:,} samples in {summary.files:,} files "
        f"({summary.bytes / 1e6:,.0f} MB) in {summary.seconds:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
