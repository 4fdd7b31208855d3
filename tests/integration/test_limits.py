"""Connection limits (gateway/server/limits.py) against a real gateway and Tansu broker,
with real sockets: caps at accept, idle close, the first-request deadline, and the
memory budget for partial requests."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import time
import urllib.request
from pathlib import Path

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.procs import GatewayProcess
from tests.integration.test_correlation import _frame

VERSIONS = _frame(
    18, 3, 7, ApiVersionsRequest(client_software_name="limits", client_software_version="1")
)
# How long a test waits for something that must happen (never a bound it asserts on).
PATIENCE_S = 20.0


def connect(gw: GatewayProcess, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(
        (gw.host, gw.port), timeout=PATIENCE_S, source_address=(source, 0)
    )
    return sock


def served(sock: socket.socket, request: bytes = VERSIONS) -> bool:
    """Send ApiVersions (correlation id 7); True when an answer came, False when the
    gateway closed."""
    try:
        sock.sendall(request)
        head = b""
        while len(head) < 8:  # no MSG_WAITALL: TLS sockets refuse flags
            chunk = sock.recv(8 - len(head))
            if not chunk:
                return False
            head += chunk
    except (ConnectionResetError, BrokenPipeError):
        return False
    size, cid = struct.unpack(">ii", head)
    assert cid == 7
    rest = size - 4
    while rest:
        chunk = sock.recv(rest)
        assert chunk
        rest -= len(chunk)
    return True


def closed_by_gateway(sock: socket.socket) -> bool:
    """Wait (up to PATIENCE_S) for the gateway to close ``sock``."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def counter(
    gw: GatewayProcess, name: str, reason: str | None = None, label: str = "reason"
) -> float:
    with urllib.request.urlopen(gw.metrics_url, timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and (reason is None or sample.labels.get(label) == reason):
                return sample.value
    raise AssertionError(f"{name} {reason} not in /metrics")


def metric_sum(gw: GatewayProcess, name: str) -> float:
    """A sample summed over its labels (and workers)."""
    with urllib.request.urlopen(gw.metrics_url, timeout=5) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


def probe_released(gw: GatewayProcess) -> GatewayProcess:
    """``gw`` once the harness's readiness probe (a TCP connect to the listen port) was
    accepted and no longer counts against the caps: it does until the gateway has seen
    it close, and a worker still starting up can take a while (a CI run saw a per-IP
    cap of 3 refuse the third connection)."""
    deadline = time.monotonic() + PATIENCE_S
    while not (
        metric_sum(gw, "kafka_gateway_connections_total") >= 1
        and metric_sum(gw, "kafka_gateway_connections_active") == 0
    ):
        assert time.monotonic() < deadline, "the readiness probe's connection never closed"
        time.sleep(0.05)
    return gw


def test_idle_connection_is_closed(gateway_factory) -> None:
    gw = gateway_factory("--connections-max-idle-ms", "300", metrics=True)
    with connect(gw) as sock:
        assert served(sock)
        assert closed_by_gateway(sock)
    assert counter(gw, "kafka_gateway_connections_closed_total", "idle") == 1
    assert "connection.closed_by_limit" in gw.log_path.read_text()


def test_first_request_deadline_closes_silent_and_half_sent(gateway_factory) -> None:
    gw = gateway_factory("--connection-first-request-timeout-ms", "300", metrics=True)
    with connect(gw) as silent, connect(gw) as half, connect(gw) as good:
        half.sendall(VERSIONS[: len(VERSIONS) // 2])
        assert served(good)
        assert closed_by_gateway(silent)
        assert closed_by_gateway(half)
        assert served(good)  # a client that sent a whole request stays
    assert counter(gw, "kafka_gateway_connections_closed_total", "first_request_timeout") == 2


def test_total_cap_closes_at_accept(gateway_factory) -> None:
    gw = probe_released(gateway_factory("--max-connections", "3", metrics=True))
    socks = [connect(gw) for _ in range(3)]
    try:
        assert all(served(s) for s in socks)
        with connect(gw) as over:
            assert not served(over)
        socks.pop().close()
        # The freed slot is given back (the gateway sees the close asynchronously).
        deadline = time.monotonic() + PATIENCE_S
        while time.monotonic() < deadline:
            with connect(gw) as again:
                if served(again):
                    break
        else:
            raise AssertionError("a slot freed by a close was never reused")
    finally:
        for s in socks:
            s.close()
    assert counter(gw, "kafka_gateway_connections_refused_total", "max_connections") >= 1


def test_per_ip_cap_and_override(gateway_factory) -> None:
    gw = probe_released(
        gateway_factory(
            "--max-connections-per-ip",
            "2",
            "--max-connections-per-ip-overrides",
            "127.0.0.2:1",
            metrics=True,
        )
    )
    first = [connect(gw) for _ in range(2)]
    other = connect(gw, "127.0.0.2")
    try:
        assert all(served(s) for s in first)
        assert served(other)
        with connect(gw) as over:
            assert not served(over)
        with connect(gw, "127.0.0.2") as over:
            assert not served(over)
    finally:
        for s in [*first, other]:
            s.close()
    assert counter(gw, "kafka_gateway_connections_refused_total", "max_connections_per_ip") == 2


def test_creation_rate_holds_new_connections_then_serves_them(gateway_factory) -> None:
    # As Kafka's acceptor throttles: 12 connections opened at once at 5 a second are all
    # served, those over the rate after a wait (the bucket holds 5 to start with).
    gw = gateway_factory("--max-connection-creation-rate", "5", metrics=True)
    socks = [connect(gw) for _ in range(12)]
    try:
        assert all(served(sock) for sock in socks)
    finally:
        for sock in socks:
            sock.close()
    assert counter(gw, "kafka_gateway_connections_throttled_total") >= 1
    assert (
        counter(gw, "kafka_gateway_connections_refused_total", "max_connection_creation_rate") == 0
    )
    assert "connection.throttled" in gw.log_path.read_text()


def test_creation_rate_closes_what_would_wait_past_its_deadline(gateway_factory) -> None:
    # 2 a second and a 1 s first-request deadline: of 10 connections opened at once, the
    # first few are served (2 saved-up tokens, then waits of 0.5 s and 1 s); the rest
    # would wait longer than their deadline and are closed at once.
    gw = gateway_factory(
        "--max-connection-creation-rate",
        "2",
        "--connection-first-request-timeout-ms",
        "1000",
        metrics=True,
    )
    socks = [connect(gw) for _ in range(10)]
    try:
        outcomes = [served(sock) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
    assert any(outcomes) and not all(outcomes)
    refused = counter(gw, "kafka_gateway_connections_refused_total", "max_connection_creation_rate")
    assert refused == outcomes.count(False)
    assert counter(gw, "kafka_gateway_connections_throttled_total") >= 1


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


# The attack at full scale: 120 connections each announcing a 50 MB request the
# gateway gathers (ApiVersions, which it answers itself) and sending up to 20 MB of it
# (2.4 GB in all: without a budget RSS grows by that much, 2,409 MiB measured).
ATTACKERS = 120
ANNOUNCED = 50 * 1024 * 1024
SENT = 20 * 1024 * 1024
BUDGET = 32 * 1024 * 1024
# A connection is paused at its first read over the budget, so each may hold one read
# (uvloop reads up to 256 KiB: 30 MiB for 120) beyond it; the rest is allocator slack.
MARGIN = 64 * 1024 * 1024


def test_memory_budget_pauses_reading_and_serves_others(gateway_factory) -> None:
    # The first-request deadline would close the attackers mid-test: out of the way.
    gw = gateway_factory(
        "--queued-max-request-bytes",
        str(BUDGET),
        "--connection-first-request-timeout-ms",
        "600000",
        metrics=True,
    )
    with connect(gw) as probe:
        assert served(probe)
    before = rss_bytes(gw.pid)
    head = struct.pack(">i", ANNOUNCED) + VERSIONS[4:12]
    chunk = b"\0" * (256 * 1024)
    attackers = [connect(gw) for _ in range(ATTACKERS)]
    try:
        for sock in attackers:
            sock.sendall(head)  # 12 bytes: always fits the socket buffer
            sock.setblocking(False)
        # Push SENT bytes into each, as far as the sockets take them (paused ones fill
        # their kernel buffers and stop accepting: a second without progress ends it).
        sent = [0] * ATTACKERS
        deadline = time.monotonic() + PATIENCE_S
        stalled = 0
        while time.monotonic() < deadline and any(n < SENT for n in sent) and stalled < 20:
            progress = False
            for i, sock in enumerate(attackers):
                if sent[i] >= SENT:
                    continue
                try:
                    sent[i] += sock.send(chunk[: SENT - sent[i]])
                    progress = True
                except BlockingIOError:
                    pass
            stalled = 0 if progress else stalled + 1
            if not progress:
                time.sleep(0.05)
        assert sum(sent) > BUDGET + MARGIN, "the attack must offer more than budget + margin"
        time.sleep(1.0)  # let the gateway read what it will
        grown = rss_bytes(gw.pid) - before
        assert grown < BUDGET + MARGIN, f"RSS grew {grown >> 20} MiB of {sum(sent) >> 20} sent"
        with connect(gw) as other:
            assert served(other)
            assert served(other)
    finally:
        for sock in attackers:
            sock.close()
    assert counter(gw, "kafka_gateway_client_reads_paused_total") >= 1


# -- several workers: the caps hold for the whole gateway ---------------------------------
WORKERS = 3


def workers_gateway(gateway_factory, *args: str) -> GatewayProcess:
    gw = gateway_factory("--workers", str(WORKERS), *args, metrics=True)
    ready = f"ready ({WORKERS}/{WORKERS} workers)\n".encode()
    url = gw.metrics_url.replace("/metrics", "/readyz")
    deadline = time.monotonic() + PATIENCE_S
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.read() == ready:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "the workers never all served"
        time.sleep(0.1)
    return probe_released(gw)


def connection_rows(gw: GatewayProcess, count: int) -> list[dict[str, object]]:
    """/connections once it lists ``count`` connections (each worker reports its own)."""
    url = gw.metrics_url.replace("/metrics", "/connections")
    deadline = time.monotonic() + PATIENCE_S
    while True:
        with urllib.request.urlopen(url, timeout=5) as response:
            rows: list[dict[str, object]] = json.load(response)
        if len(rows) == count:
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(0.1)


def log_events(gw: GatewayProcess, event: str) -> list[dict[str, object]]:
    return [
        json.loads(line) for line in gw.log_text().splitlines() if f'"event": "{event}"' in line
    ]


def test_per_ip_cap_holds_whichever_worker_accepts(gateway_factory) -> None:
    gw = workers_gateway(gateway_factory, "--max-connections-per-ip", "3")
    held = [connect(gw) for _ in range(3)]
    try:
        assert all(served(sock) for sock in held)
        # SO_REUSEPORT hands these to the workers by a hash of the client port: every
        # worker refuses, whether or not it holds any of the three.
        for _ in range(12):
            with connect(gw) as over:
                assert not served(over)
        refusing = {line["worker"] for line in log_events(gw, "connection.refused")}
        assert len(refusing) > 1, refusing  # all 12 on one worker: a 3·(1/3)^12 chance
        held.pop().close()
        # The close, on one worker, frees the slot for whichever worker accepts next.
        deadline = time.monotonic() + PATIENCE_S
        while True:
            with connect(gw) as again:
                if served(again):
                    break
            assert time.monotonic() < deadline, "a slot freed by a close was never reused"
    finally:
        for sock in held:
            sock.close()
    assert counter(gw, "kafka_gateway_connections_refused_total", "max_connections_per_ip") >= 12


def test_total_cap_holds_across_workers_and_a_dead_workers_share_is_freed(
    gateway_factory,
) -> None:
    gw = workers_gateway(gateway_factory, "--max-connections", "6")
    socks = [connect(gw) for _ in range(6)]
    try:
        assert all(served(sock) for sock in socks)
        with connect(gw) as over:
            assert not served(over)
        rows = connection_rows(gw, 6)
        pid_of = {row["peer"]: row["worker_pid"] for row in rows}
        owners = [pid_of[f"127.0.0.1:{sock.getsockname()[1]}"] for sock in socks]
        victim = max(set(owners), key=owners.count)
        lost = owners.count(victim)
        assert isinstance(victim, int)
        os.kill(victim, signal.SIGKILL)
        gw.wait_for_log(r'"event": "worker.died"', timeout=PATIENCE_S)
        (died,) = log_events(gw, "worker.died")
        assert died["connections_released"] == lost
        # The survivors stay open and counted; the dead worker's slots are free again:
        # exactly ``lost`` new connections fit, whichever workers take them.
        for sock, owner in zip(socks, owners, strict=True):
            assert served(sock) == (owner != victim)
        outcomes = []
        for _ in range(lost + 1):
            socks.append(connect(gw))
            outcomes.append(served(socks[-1]))
        assert outcomes == [True] * lost + [False]
    finally:
        for sock in socks:
            sock.close()


def test_creation_rate_is_one_bucket_for_all_workers(gateway_factory) -> None:
    # 5 a second for the gateway: 12 connections opened at once are all served, and
    # some wait. Were each worker a bucket of 5 of its own, only a worker handed 6 or
    # more of the 12 would make one wait.
    gw = workers_gateway(gateway_factory, "--max-connection-creation-rate", "5")
    socks = [connect(gw) for _ in range(12)]
    try:
        assert all(served(sock) for sock in socks)
    finally:
        for sock in socks:
            sock.close()
    throttled = {line["worker"] for line in log_events(gw, "connection.throttled")}
    assert counter(gw, "kafka_gateway_connections_throttled_total") >= 1, throttled
    assert (
        counter(gw, "kafka_gateway_connections_refused_total", "max_connection_creation_rate") == 0
    )


def test_client_software_labels_are_capped(gateway_factory) -> None:
    # A client may announce any KIP-511 name and version: past the cap, new pairs share
    # the label "other", so /metrics cannot grow without bound.
    gw = gateway_factory("--max-client-software-labels", "2", metrics=True)
    socks = []
    try:
        for i in range(5):
            sock = connect(gw)
            socks.append(sock)
            announce = ApiVersionsRequest(
                client_software_name=f"hostile-{i}", client_software_version="6.6.6"
            )
            assert served(sock, _frame(18, 3, 7, announce))  # served, whatever its label
        with urllib.request.urlopen(gw.metrics_url, timeout=5) as response:
            text = response.read().decode()
        active = {
            sample.labels["client_software_name"]: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "kafka_gateway_connections_active" and sample.value
        }
        assert active == {"hostile-0": 1, "hostile-1": 1, "other": 3}
        assert counter(gw, "kafka_gateway_client_software_labels_overflow_total") == 3
        assert "metrics.client_software_labels_full" in gw.log_path.read_text()
    finally:
        for sock in socks:
            sock.close()
