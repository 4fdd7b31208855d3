"""Apache Kafka's Java client (kafka-clients 4.x) as a test part: the probe program.

``tests/clients/java`` holds a small Java program (``kafkagateway.probe.Main``) that runs
one client scenario (produce, consume, transactions, admin, share) and prints what it saw
as JSON lines. This module builds it with Maven from the repository's ``pom.xml`` into
``$XDG_CACHE_HOME/kafka-gateway/java-client-probe-<hash>`` (``~/.cache`` by default),
where the hash covers the pom and every source file: one compile per source change,
shared by every session and by parallel runs (a file lock, as for Apache Kafka's jars).
Nothing is written into the repository.

Kept free of pytest: a missing ``mvn``/``javac``/``java`` raises ``JavaToolMissing``,
which the tests turn into a skip.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.server.apache_kafka import KafkaDistError, cache_root, file_lock, maven

from .procs import HarnessError
from .tools import find_tool, missing_tool_reason

PROBE_DIR = Path(__file__).resolve().parents[1] / "clients" / "java"
MAIN_CLASS = "kafkagateway.probe.Main"
#: Kafka 1.0's AdminClient (kafka-clients 1.0.2), the admin v0s' client: the same
#: command line and events, built the same way (``build(OLD_ADMIN)``).
OLD_ADMIN = (PROBE_DIR / "old-admin", "kafkagateway.oldadmin.Main", "java-old-admin")
_STAMP = ".complete"

#: A client JVM on a 2-core box: small heap, C1 only (starts in well under a second), and
#: the client's own log at WARN on stderr (its INFO lines run to hundreds per scenario).
JVM_OPTIONS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    "-Dorg.slf4j.simpleLogger.logFile=System.err",
)


class JavaToolMissing(HarnessError):
    """A tool the probe needs is not on PATH; ``tool`` names it, the message says how to
    install it."""

    def __init__(self, tool: str) -> None:
        super().__init__(missing_tool_reason(tool, "the Java client probe needs it"))
        self.tool = tool


def sources_hash(probe_dir: Path = PROBE_DIR) -> str:
    """A hash of the probe's pom and sources: the cache key of a build."""
    digest = hashlib.sha256()
    files = [probe_dir / "pom.xml", *sorted((probe_dir / "src").rglob("*.java"))]
    for path in files:
        digest.update(str(path.relative_to(probe_dir)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _tool(name: str) -> str:
    found = find_tool(name)
    if found is None:
        raise JavaToolMissing(name)
    return found


@dataclass(frozen=True)
class ProbeRun:
    """One run of the probe: its events (JSON lines, in order), exit code and client log."""

    argv: list[str]
    events: list[dict[str, Any]]
    returncode: int
    stderr: str
    seconds: float

    def of(self, event: str) -> list[dict[str, Any]]:
        """Every event named ``event``."""
        return [e for e in self.events if e["event"] == event]

    def one(self, event: str) -> dict[str, Any]:
        """The single event named ``event``; fails with everything the probe said if not."""
        found = self.of(event)
        assert len(found) == 1, f"expected one {event!r} event\n{self.describe()}"
        return found[0]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return self.of("error")

    def values(self, how: str) -> list[str]:
        """The values of the records read ``how`` (group, read_committed, share, ...)."""
        return [e["value"] for e in self.of("record") if e["how"] == how]

    def describe(self) -> str:
        """The run for an assertion message: events, then the tail of the client's log."""
        events = "\n".join(json.dumps(e) for e in self.events)
        log = "\n".join(self.stderr.splitlines()[-40:])
        head = f"$ {' '.join(self.argv[-12:])}  # exit {self.returncode}, {self.seconds:.1f} s"
        return f"{head}\n{events}\n--- client log (tail) ---\n{log}"


@dataclass
class JavaProbe:
    """The built probe: ``run(scenario, bootstrap, **options)`` runs one scenario."""

    classpath: str
    java: str
    main_class: str = MAIN_CLASS

    def run(
        self,
        scenario: str,
        bootstrap: str,
        *,
        timeout: float = 60.0,
        **options: str | int,
    ) -> ProbeRun:
        """Run ``scenario`` against ``bootstrap``; options become ``--name value``
        (underscores in names turn into dashes). Raises if the probe itself fails (exit
        code not 0, or no ``done`` event); a failed client call is an ``error`` event."""
        argv = [self.java, *JVM_OPTIONS, "-cp", self.classpath, self.main_class, scenario]
        argv += ["--bootstrap", bootstrap]
        for name, value in options.items():
            argv += [f"--{name.replace('_', '-')}", str(value)]
        started = time.monotonic()
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
            raise HarnessError(
                f"Java probe {scenario} ran past {timeout} s\n{out}\n--- log ---\n{err[-4000:]}"
            ) from None
        events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        run = ProbeRun(argv, events, done.returncode, done.stderr, time.monotonic() - started)
        if done.returncode != 0 or not run.of("done"):
            raise HarnessError(f"Java probe {scenario} exited {done.returncode}\n{run.describe()}")
        return run


def build(
    program: tuple[Path, str, str] = (PROBE_DIR, MAIN_CLASS, "java-client-probe"),
) -> JavaProbe:
    """The probe built from the repository's sources (Maven, on first use per hash);
    ``program``: (its directory, main class, cache name), e.g. ``OLD_ADMIN``."""
    probe_dir, main_class, cache_name = program
    _tool("mvn")  # each raises JavaToolMissing (a skip) where absent
    _tool("javac")
    java = shutil.which("java") or _tool("javac")  # javac comes with a java
    target = cache_root() / f"{cache_name}-{sources_hash(probe_dir)}"
    classpath = f"{target / 'build' / 'classes'}:{target / 'lib'}/*"
    if (target / _STAMP).exists():
        return JavaProbe(classpath, java, main_class)
    with file_lock(target.with_suffix(".lock")):
        if not (target / _STAMP).exists():
            shutil.rmtree(target, ignore_errors=True)
            try:
                maven(
                    "build the Java client probe",
                    "-f", str(probe_dir / "pom.xml"), f"-Dprobe.build.dir={target / 'build'}",
                    "compile", "dependency:copy-dependencies",
                    "-DincludeScope=runtime", f"-DoutputDirectory={target / 'lib'}",
                )  # fmt: skip
            except KafkaDistError as exc:
                raise HarnessError(str(exc)) from None
            (target / _STAMP).write_text(sources_hash(probe_dir) + "\n")
    return JavaProbe(classpath, java, main_class)
