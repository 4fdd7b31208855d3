"""Fetching one jar of one Apache Kafka release from Maven Central, with ``mvn``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

GROUP = "org.apache.kafka"


class MavenError(RuntimeError):
    """A jar could not be fetched; the message says what and why."""


def fetch_jar(
    artifact: str,
    version: str,
    cache: Path,
    classifier: str | None = None,
    group: str = GROUP,
) -> Path:
    """The path of ``GROUP:ARTIFACT:VERSION[:jar:CLASSIFIER]`` under ``cache`` (the group is
    Apache Kafka's unless given), fetched with ``mvn dependency:copy`` unless it is there
    already."""
    name = f"{artifact}-{version}" + (f"-{classifier}" if classifier else "") + ".jar"
    target = cache / name
    if target.exists():
        return target
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError(
            f"fetching {name} needs Maven (`mvn`), which is not on PATH: apt-get install maven"
        )
    coordinates = f"{group}:{artifact}:{version}" + (f":jar:{classifier}" if classifier else "")
    cache.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [mvn, "-q", "-B", "dependency:copy", f"-Dartifact={coordinates}",
         f"-DoutputDirectory={cache}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0 or not target.exists():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-10:])
        raise MavenError(
            f"Maven could not fetch {coordinates} (exit {done.returncode}); is Maven Central "
            f"reachable (a proxy in ~/.m2/settings.xml)?\n{tail}"
        )
    return target
