"""A first run as a new user makes it: `scripts/run`, then every command it prints, pasted.

The stack is the real one: scripts/run (on free ports instead of 9092/9404, through its
own --listen/--metrics-listen pass-through) starting ZooKeeper, Tansu and the gateway.
Each printed command runs in a new bash in the repository root whose PATH has no
virtualenv on it (tests/harness/shell.py), exactly as pasted. Run from the repository's
.venv (scripts/test), as a user would after scripts/run made it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.metadata.v12.request import MetadataRequest

from gateway.commands import shell_command
from gateway.features.store import DEFAULT_CHROOT, ZOOKEEPER_ENV, FeatureStore, make_client
from tests.conftest import require_tool
from tests.harness import LOOPBACK, KafkaConnection, ManagedProcess, free_port, port_accepts
from tests.harness.apache_kafka import KRAFT_VERSION
from tests.harness.kafka_wire import parse_features
from tests.harness.shell import (
    ROOT,
    command_problem,
    markdown_shell_blocks,
    new_shell_env,
    simple_commands,
)
from tests.unit.featurectl.test_help_examples import examples, help_epilogs

RUN = ROOT / "scripts" / "run"
BANNER_END = "Ctrl-C stops everything."
# "  label: value" lines of the banner.
_BANNER_LINE = re.compile(r"^  (?P<label>[^:\n]+): (?P<value>.+)$", re.MULTILINE)


class ScriptsRun(ManagedProcess):
    """`scripts/run` on free ports; ready once the banner is out and clients can connect."""

    start_timeout = 120.0  # ZooKeeper (a JVM) and Tansu start first

    def __init__(self, workdir: Path, *extra: str) -> None:
        self.extra = list(extra)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_GATEWAY")}
        # This checkout's code, also where .venv's editable install points elsewhere.
        env.update(
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
            KAFKA_GATEWAY_HOME=str(workdir / "stack"),
        )
        super().__init__("scripts-run", workdir / "scripts-run.log", env=env)
        self.port = free_port()
        self.metrics_port = free_port()

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def metrics(self) -> str:
        return f"{LOOPBACK}:{self.metrics_port}"

    def command(self) -> list[str]:
        return [str(RUN), "--listen", self.bootstrap, "--metrics-listen", self.metrics, *self.extra]

    def _probe_ready(self) -> bool:
        return BANNER_END in self.log_text() and port_accepts(LOOPBACK, self.port, timeout=0.5)

    def banner(self) -> dict[str, str]:
        text = self.log_text()
        start = text.index("kafka-gateway is up.")
        return {m["label"]: m["value"] for m in _BANNER_LINE.finditer(text, start)}


@dataclass
class FirstRun:
    stack: ScriptsRun
    banner: dict[str, str]
    zookeeper: str
    export: str  # the banner's `export KAFKA_GATEWAY_ZOOKEEPER=...` line


def wait_for_registration(zookeeper: str, timeout: float = 60.0) -> None:
    """Readiness: the gateway has registered, so featurectl sees a live gateway."""
    client = make_client(zookeeper)
    client.start(timeout=15)
    try:
        store = FeatureStore(client, DEFAULT_CHROOT)
        deadline = time.monotonic() + timeout
        while not store.registrations():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no gateway registered in {zookeeper} after {timeout:g} s")
            time.sleep(0.2)
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FirstRun]:
    if not (ROOT / ".venv" / "bin" / "kafka-gateway").exists():
        # scripts/run would create and install it first (minutes, network): scripts/test
        # has made it by the time this runs.
        pytest.skip("needs the repository's .venv (scripts/test creates it)")
    stack = ScriptsRun(tmp_path_factory.mktemp("first-run"))
    stack.start()
    try:
        banner = stack.banner()
        exports = [v for v in banner.values() if v.startswith(f"export {ZOOKEEPER_ENV}=")]
        assert len(exports) == 1, banner
        zookeeper = exports[0].partition("=")[2]
        wait_for_registration(zookeeper)
        yield FirstRun(stack, banner, zookeeper, exports[0])
    finally:
        code = stack.stop()
    assert code == 0, f"scripts/run exited with {code} on SIGTERM\n{stack.log_tail()}"


def paste(*lines: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``lines`` in one new bash in ``cwd``, as a user pasting them would."""
    return subprocess.run(
        ["bash", "-c", "\n".join(lines)],
        cwd=cwd,
        env=new_shell_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_banner_prints_commands_that_run_as_printed(first_run: FirstRun) -> None:
    featurectl = shell_command("featurectl")
    commands = {
        label: value
        for label, value in first_run.banner.items()
        if shlex.split(value)[0] in (featurectl, "export")
    }
    assert set(commands) >= {"feature levels", "featurectl in another shell"}, first_run.banner

    describe = paste(commands["feature levels"])
    assert describe.returncode == 0, describe.stderr
    assert "eligible.leader.replicas.version" in describe.stdout
    assert "Live gateways (1)" in describe.stdout

    # The export is for featurectl in the next shell: after it, --zookeeper is not needed.
    exported = paste(
        commands["featurectl in another shell"], f"{featurectl} describe --output json"
    )
    assert exported.returncode == 0, exported.stderr
    (gateway,) = json.loads(exported.stdout)["gateways"]
    assert gateway["listener"].endswith(f":{first_run.stack.port}")

    with urllib.request.urlopen(first_run.banner["metrics"], timeout=10) as response:
        assert b"kafka_gateway_info" in response.read()


def walkthrough_lines() -> list[str]:
    """The README walkthrough's terminal-2 block (the one after `scripts/run`)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Walkthrough\n", 1)[1].split("\n## ", 1)[0]
    first, second = markdown_shell_blocks(section)[:2]
    assert any(line.startswith("scripts/run") for line in first.lines)
    return [line for line in second.lines if line.strip() and not line.startswith("#")]


@pytest.mark.slow
def test_the_readme_walkthrough_runs_as_printed(first_run: FirstRun, tmp_path: Path) -> None:
    # Its clients are Kafka's own tools, which the project installs (gateway/kafka_tools.py);
    # curl is the one command it borrows from the system (.ci/run installs it).
    require_tool("curl")
    stack = first_run.stack
    # The README uses scripts/run's default ports and /tmp; this stack has its own.
    replacements = {
        f"{LOOPBACK}:9092": stack.bootstrap,
        f"{LOOPBACK}:9404": stack.metrics,
        "/tmp/": f"{tmp_path}/",
    }
    # What each walkthrough command must show, by a fragment of the command. A command
    # not listed here is still run and must exit 0 (or, marked "refused", fail).
    shows = {
        # The broker as clients see it: the gateway's address, not the broker's.
        "kafka-broker-api-versions": f"{stack.bootstrap} (id:",
        "kafka-topics": "Created topic",
        "kafka-console-consumer": "hello",
        " describe": "eligible.leader.replicas.version",
        " finalize": "epoch",
        " disable": "epoch",
        "kafka_gateway_feature": "kafka_gateway_feature",
    }
    ran = []
    for line in walkthrough_lines():
        for old, new in replacements.items():
            line = line.replace(old, new)
        done = paste(first_run.export, line)
        output = done.stdout + done.stderr
        if "# refused" in line:
            assert done.returncode != 0 and "refus" in output, (line, output)
        else:
            assert done.returncode == 0, (line, output)
        for fragment, shown in shows.items():
            if fragment in line.split("#")[0]:
                assert shown in output, (line, output)
        ran.append(line)
    assert len(ran) >= 8
    # `plan`'s output directory, as the walkthrough's last comment says.
    assert (tmp_path / "kgw-plan" / "report.md").is_file()
    # The plan's own steps print commands too: each runs as printed from here.
    plan = json.loads((tmp_path / "kgw-plan" / "plan.json").read_text())
    printed = [step["command"] for step in plan["steps"] if step["command"]]
    assert printed, plan["steps"]
    problems = [
        (line, problem)
        for line in printed
        for words in simple_commands(line)
        if (problem := command_problem(words)) is not None
    ]
    assert problems == []


# Help examples that only read, or validate and get refused, against the live stack;
# the rest (a gateway on 0.0.0.0:9092, collect every 15 s until Ctrl-C, Spark on a
# cluster) are checked without running them (tests/unit/featurectl/test_help_examples.py).
RUN_AGAINST_THE_STACK = ("describe", "finalize", "downgrade", "disable", "brokers")


@pytest.mark.parametrize("command", RUN_AGAINST_THE_STACK)
def test_featurectl_help_examples_run_against_the_stack(first_run: FirstRun, command: str) -> None:
    epilog = help_epilogs()[f"featurectl {command}"]
    lines = [" ".join(map(shlex.quote, words)) for words in examples(epilog)]
    assert lines, f"featurectl {command} --help shows no example"
    for line in lines:
        line = line.replace("zk-0:2181", first_run.zookeeper)
        line = line.replace("gw-0:9092", first_run.stack.bootstrap)
        # --zookeeper left out: as after the banner's export line.
        done = paste(first_run.export, line)
        # 0 ok, 1 answered but rejected (Tansu lacks what group.version etc. gate);
        # 2 (usage, ZooKeeper unreachable) would mean the example does not work as printed.
        assert done.returncode in (0, 1), (line, done.stdout + done.stderr)
        assert "usage:" not in done.stderr, (line, done.stderr)
        assert done.stdout or done.stderr
    assert simple_commands(lines[0])[0][0] == shell_command("featurectl")


def test_scripts_run_broker_kafka_puts_apache_kafka_behind_the_gateway(tmp_path: Path) -> None:
    """`scripts/run --broker kafka`: the real broker, fetched with Maven, behind the gateway."""
    if not (ROOT / ".venv" / "bin" / "kafka-gateway").exists():
        pytest.skip("needs the repository's .venv (scripts/test creates it)")
    stack = ScriptsRun(tmp_path, "--broker", "kafka")
    stack.start()
    try:
        brokers = {k: v for k, v in stack.banner().items() if k.startswith("broker (")}
        assert list(brokers) == [f"broker (Apache Kafka {KRAFT_VERSION})"], stack.banner()
        with KafkaConnection(LOOPBACK, stack.port) as conn:
            features = parse_features(conn.api_versions(4))
            metadata = conn.request_entity(
                MetadataRequest(
                    topics=None,
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                )
            )
        # Kafka's own feature, merged into the gateway's answer; addresses rewritten.
        assert "metadata.version" in features.finalized, features
        assert [(b.host, b.port) for b in metadata.brokers] == [(LOOPBACK, stack.port)]
    finally:
        code = stack.stop()
    assert code == 0, f"scripts/run --broker kafka exited with {code}\n{stack.log_tail()}"
