"""`scripts/run` and `kafka-gateway` against ports in use, and what they leave behind.

Real processes over real sockets: a running `scripts/run` (ZooKeeper, Tansu, a gateway
with its workers) holds the ports a second one asks for; a ZooKeeper behind a relay that
answers late holds the gateway's start between the embedded stack and its listeners,
where the banner used to be printed; a socket the test takes while the stack starts
fails the gateway's own bind after the early check passed. The embedded stack's scratch
directory goes to a TMPDIR of the test's own, so what is left there can be counted.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import LOOPBACK, KafkaConnection, ZooKeeperProcess, free_port, port_accepts
from tests.harness.shell import ROOT
from tests.integration.test_first_run import BANNER_END, RUN, ScriptsRun

GATEWAY = ROOT / ".venv" / "bin" / "kafka-gateway"
BANNER_START = "kafka-gateway is up"
# A second run must fail before it starts a ZooKeeper (a JVM): well under this.
FAST_S = 15.0


def advice(address: str, flag: str, key: str) -> str:
    """The one line a taken port gives (gateway.server.ports.Port.advice)."""
    return (
        f"kafka-gateway: {address} is already in use (another kafka-gateway or "
        f"scripts/run?); pick another with {flag} HOST:PORT (config: {key})"
    )


def run_env(tmpdir: Path) -> dict[str, str]:
    """scripts/run's environment as a user's: no KAFKA_GATEWAY_HOME (so the stack makes
    a scratch directory), TMPDIR the test's own (so what is left there can be seen)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_GATEWAY")}
    tmpdir.mkdir(parents=True, exist_ok=True)
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", TMPDIR=str(tmpdir))
    return env


def scratch_dirs(tmpdir: Path) -> list[Path]:
    return sorted(tmpdir.glob("kafka-gateway-*"))


def wait_for_stack_start(tmpdir: Path, proc: subprocess.Popen[bytes], log_path: Path) -> Path:
    """The scratch directory, once ZooKeeper's log is in it: the port check is done and
    the embedded stack is starting."""
    deadline = time.monotonic() + 60
    while not list(tmpdir.glob("kafka-gateway-*/zookeeper.log")):
        assert proc.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.02)
    (workdir,) = scratch_dirs(tmpdir)
    return workdir


def processes_using(path: Path) -> list[str]:
    """Processes whose command line or open files name ``path`` (ZooKeeper's data
    directory is an argument; Tansu's output is a log file there)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            targets = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if any(str(path) in text for text in [cmdline, *targets]):
            found.append(f"{proc.name}: {cmdline}")
    return found


def readyz(address: str) -> int:
    """The /readyz status; 0 when nothing answers (a probe must not raise: the harness
    would take that as "not yet" and ask again, past the moment that matters)."""
    try:
        with urllib.request.urlopen(f"http://{address}/readyz", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:  # URLError (refused) included
        return 0


def assert_serves(stack: ScriptsRun) -> None:
    with KafkaConnection(LOOPBACK, stack.port) as conn:
        assert conn.api_versions(3).error_code == 0
    assert readyz(stack.metrics) == 200


def _needs_venv() -> None:
    if not GATEWAY.exists():
        pytest.skip("needs the repository's .venv (scripts/test creates it)")


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptsRun]:
    """A first `scripts/run` (two workers, the default), holding its two ports."""
    _needs_venv()
    stack = ScriptsRun(tmp_path_factory.mktemp("first"))
    stack.start()
    try:
        yield stack
    finally:
        code = stack.stop()
    assert code == 0, f"the first scripts/run exited with {code}\n{stack.log_tail()}"


def only_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.stdout == "", done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("taken", ["both", "metrics"])
def test_a_second_scripts_run_on_taken_ports_exits_2_with_one_line(
    running: ScriptsRun, tmp_path: Path, taken: str
) -> None:
    listen = running.bootstrap if taken == "both" else f"{LOOPBACK}:{free_port()}"
    started = time.monotonic()
    done = subprocess.run(
        [str(RUN), "--listen", listen, "--metrics-listen", running.metrics],
        env=run_env(tmp_path / "tmp"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    # The client listener is checked first: it is what a second run collides on.
    if taken == "both":
        expected = advice(running.bootstrap, "--listen", "listen")
    else:
        expected = advice(running.metrics, "--metrics-listen", "metrics_listen")
    assert only_line(done) == expected
    assert took < FAST_S, f"took {took:.1f} s: the stack was started before the check?"
    assert scratch_dirs(tmp_path / "tmp") == []
    # The first was not disturbed (the check binds, it never listens or connects).
    assert_serves(running)
    assert BANNER_START not in done.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("taken", ["listen", "metrics"])
def test_kafka_gateway_with_upstream_on_a_taken_port_exits_2_with_one_line(
    running: ScriptsRun, tmp_path: Path, workers: str, taken: str
) -> None:
    broker = running.banner()["broker (Tansu)"].split()[0]
    if taken == "listen":
        ports = ["--listen", running.bootstrap]
        expected = advice(running.bootstrap, "--listen", "listen")
    else:
        ports = ["--listen", f"{LOOPBACK}:{free_port()}", "--metrics-listen", running.metrics]
        expected = advice(running.metrics, "--metrics-listen", "metrics_listen")
    done = subprocess.run(
        [str(GATEWAY), "--upstream", broker, "--workers", workers, *ports],
        env=run_env(tmp_path / "tmp"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert only_line(done) == expected
    assert_serves(running)


class _SlowRelay:
    """A TCP relay to ZooKeeper that holds each new connection's bytes for ``delay_s``.

    The gateway (its supervisor, then each worker) starts a ZooKeeper session and reads
    the finalized levels before it binds: a ZooKeeper slow to answer keeps a gateway
    between "the embedded stack is up" and "the listeners are bound" for seconds, where
    a banner printed too early would be seen with nothing listening.
    """

    def __init__(self, upstream: tuple[str, int], delay_s: float) -> None:
        self.upstream = upstream
        self.delay_s = delay_s
        self.listener = socket.create_server((LOOPBACK, 0))
        self.port = int(self.listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        server.settimeout(None)
        time.sleep(self.delay_s)  # what the client sent meanwhile waits in the buffer
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self.listener.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        source.close()


class _UserRun(ScriptsRun):
    """`scripts/run` as a user runs it: no KAFKA_GATEWAY_HOME, the stack's directory a
    scratch one in ``tmpdir``. Ready when the banner is out; what the ports and /readyz
    answered at that very moment is kept (ScriptsRun's readiness waits for the port too,
    which would hide a banner printed early)."""

    _probe_interval = 0.02

    def __init__(self, workdir: Path, tmpdir: Path, *extra: str) -> None:
        super().__init__(workdir, *extra)
        self._env = run_env(tmpdir)
        self.at_banner: dict[str, object] | None = None

    def _probe_ready(self) -> bool:
        if BANNER_END not in self.log_text():
            return False
        self.at_banner = {
            "listen accepts": port_accepts(LOOPBACK, self.port, timeout=2),
            "metrics accepts": port_accepts(LOOPBACK, self.metrics_port, timeout=2),
            "readyz": readyz(self.metrics),
        }
        return True


@pytest.fixture
def slow_zookeeper(shared_zookeeper: ZooKeeperProcess) -> Iterator[str]:
    relay = _SlowRelay((LOOPBACK, shared_zookeeper.port), delay_s=1.5)
    try:
        yield f"{LOOPBACK}:{relay.port}"
    finally:
        relay.close()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_banner_comes_once_the_listeners_serve_and_the_scratch_dir_goes_on_sigterm(
    tmp_path: Path, slow_zookeeper: str, workers: str
) -> None:
    _needs_venv()
    tmpdir = tmp_path / "tmp"
    stack = _UserRun(
        tmp_path,
        tmpdir,
        "--workers",
        workers,
        "--zookeeper",
        slow_zookeeper,
        "--zookeeper-chroot",
        f"/run-ports-{uuid.uuid4().hex[:8]}",
    )
    stack.start()
    try:
        # At the moment the banner was out: both ports accepted, every worker served.
        assert stack.at_banner == {
            "listen accepts": True,
            "metrics accepts": True,
            "readyz": 200,
        }, stack.log_tail()
        where = stack.banner()["logs and data"]
        assert where.endswith(" (removed on exit)"), where
        workdir = Path(where.removesuffix(" (removed on exit)"))
        assert workdir.parent == tmpdir and workdir.is_dir()
    finally:
        code = stack.stop(timeout=60)
    assert code == 0, stack.log_tail()
    assert scratch_dirs(tmpdir) == []
    assert processes_using(workdir) == []


@pytest.mark.parametrize("taken", ["listen", "metrics"])
def test_a_port_taken_while_the_stack_starts_stops_the_stack_and_removes_its_dir(
    tmp_path: Path, taken: str
) -> None:
    """The early check passed; another program takes a port before the gateway binds
    it (the check holds the ports bound, but with SO_REUSEADDR, so a listener can
    still take them). The gateway's own bind fails: the same one line, exit 2, and the
    ZooKeeper and broker already started are stopped and their directory removed."""
    _needs_venv()
    tmpdir = tmp_path / "tmp"
    listen, metrics = free_port(), free_port()
    port = listen if taken == "listen" else metrics
    log_path = tmp_path / "run.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(RUN),
                "--listen",
                f"{LOOPBACK}:{listen}",
                "--metrics-listen",
                f"{LOOPBACK}:{metrics}",
            ],
            env=run_env(tmpdir),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    thief = socket.socket()
    try:
        workdir = wait_for_stack_start(tmpdir, proc, log_path)
        thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        thief.bind((LOOPBACK, port))
        thief.listen()
        code = proc.wait(timeout=150)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        thief.close()
    output = log_path.read_text()
    assert code == 2, output
    lines = [line for line in output.splitlines() if line.startswith("kafka-gateway: ")]
    if taken == "listen":
        assert lines == [advice(f"{LOOPBACK}:{port}", "--listen", "listen")], output
    else:
        assert lines == [advice(f"{LOOPBACK}:{port}", "--metrics-listen", "metrics_listen")]
    assert BANNER_START not in output
    assert "Traceback" not in output
    assert scratch_dirs(tmpdir) == []
    assert processes_using(workdir) == [], output


def _start_run(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    log_path = tmp_path / "run.log"
    ports = [
        "--listen",
        f"{LOOPBACK}:{free_port()}",
        "--metrics-listen",
        f"{LOOPBACK}:{free_port()}",
    ]
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [str(RUN), *ports],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, log_path


def test_sigterm_while_the_stack_starts_stops_it_and_removes_its_dir(tmp_path: Path) -> None:
    """A service manager's stop during the start (ZooKeeper and Tansu just spawned)
    stops them rather than orphaning them, and removes their directory."""
    _needs_venv()
    tmpdir = tmp_path / "tmp"
    proc, log_path = _start_run(tmp_path, run_env(tmpdir))
    try:
        workdir = wait_for_stack_start(tmpdir, proc, log_path)
        proc.terminate()
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    output = log_path.read_text()
    assert code == 0, output
    assert BANNER_START not in output and "Traceback" not in output
    assert scratch_dirs(tmpdir) == []
    assert processes_using(workdir) == [], output


def test_a_failed_embedded_start_prints_the_log_tail_then_removes_the_dir(
    tmp_path: Path,
) -> None:
    """ZooKeeper exits at once: its last log lines are printed (its log goes with the
    scratch directory), with how to keep the directory, and nothing is left behind.

    The one stand-in: a ``java`` that fails as a JVM without memory does (a real one
    cannot be made to fail on demand); PATH holds it and what scripts/run needs."""
    _needs_venv()
    tmpdir = tmp_path / "tmp"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname"):
        real = subprocess.run(["which", tool], capture_output=True, text=True, check=True)
        (bin_dir / tool).symlink_to(real.stdout.strip())
    java = bin_dir / "java"
    java.write_text(
        "#!/bin/sh\necho 'Error occurred during initialization of VM' >&2\n"
        "echo 'Could not reserve enough space for object heap' >&2\nexit 1\n"
    )
    java.chmod(0o755)
    env = run_env(tmpdir)
    env["PATH"] = str(bin_dir)
    proc, log_path = _start_run(tmp_path, env)
    code = proc.wait(timeout=60)
    output = log_path.read_text()
    assert code == 1, output
    assert "ZooKeeper did not start" in output
    assert "Could not reserve enough space for object heap" in output
    assert "is removed; to keep the logs and data, set KAFKA_GATEWAY_HOME=DIR" in output
    assert BANNER_START not in output and "Traceback" not in output
    assert scratch_dirs(tmpdir) == []
