"""A release's ``ApiKeys`` enum, read by ``ApiKeysDump.java`` run against its jar.

Releases before 2.2 ship no message specs: their ApiKeys enum (and, 0.10.2-2.7, the
default ApiVersions answer their classes build) is the only record of what their brokers
advertise. For later releases the same dump is the cross-check of the rules in
``releases.py``. The Java source is committed next to this file and compiled with
``javac`` into a temporary folder at each run (a few seconds; no build step to keep).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

SOURCE = Path(__file__).with_name("ApiKeysDump.java")


class JavaError(RuntimeError):
    """javac or java is missing or failed; the message says which and why."""


@dataclass(frozen=True, slots=True)
class KeysDump:
    """What one release's ``ApiKeys`` says, as ApiKeysDump.java printed it."""

    keys: dict[int, tuple[str, int, int]] = field(default_factory=dict)
    """id -> (enum name, oldestVersion, latestVersion)."""
    flags: dict[int, dict[str, bool]] = field(default_factory=dict)
    """id -> every boolean member of the constant (isEnabled, forwardable, ...)."""
    sets: dict[str, frozenset[int]] = field(default_factory=dict)
    """Static ApiKeys collections by method name (zkBrokerApis, brokerApis, ...)."""
    consts: dict[str, int] = field(default_factory=dict)
    """Static int fields (PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION, ...)."""
    default_answer: dict[int, tuple[int, int]] = field(default_factory=dict)
    """The default ApiVersions answer the release's classes build (empty when none)."""


def parse(output: str) -> KeysDump:
    dump = KeysDump()
    for line in output.splitlines():
        kind, *rest = line.split("\t")
        if kind == "key":
            key, name, oldest, latest = rest
            dump.keys[int(key)] = (name, int(oldest), int(latest))
        elif kind == "flag":
            key, member, value = rest
            dump.flags.setdefault(int(key), {})[member] = value == "true"
        elif kind == "set":
            method, ids = rest
            dump.sets[method] = frozenset(int(i) for i in ids.split(",") if i)
        elif kind == "const":
            dump.consts[rest[0]] = int(rest[1])
        elif kind == "default":
            key, low, high = rest
            dump.default_answer[int(key)] = (int(low), int(high))
    return dump


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise JavaError(f"`{name}` is not on PATH; install a JDK 17+ (openjdk-17-jdk-headless)")
    return path


def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    if done.returncode != 0:
        raise JavaError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def dump_all(jars: Mapping[str, Path], extra_classpath: list[Path]) -> dict[str, KeysDump]:
    """Each release's dump, from its kafka-clients jar (``extra_classpath``: slf4j-api,
    which the old releases' ApiKeys needs to load)."""
    javac, java = _tool("javac"), _tool("java")
    with tempfile.TemporaryDirectory(prefix="kafka-protocol-java-") as classes:
        _run([javac, "-nowarn", "-d", classes, str(SOURCE)])

        def one(jar: Path) -> KeysDump:
            classpath = ":".join([classes, str(jar), *map(str, extra_classpath)])
            return parse(_run([java, "-cp", classpath, SOURCE.stem]))

        # Each run is a JVM start of about a second; two at a time halve the wait.
        with ThreadPoolExecutor(max_workers=2) as pool:
            dumps = dict(zip(jars, pool.map(one, jars.values()), strict=True))
    return dumps
