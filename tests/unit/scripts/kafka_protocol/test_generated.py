"""The committed protocol data is what scripts/kafka-protocol makes, and says what it should.

The regeneration needs Maven (the jars, ~30 kafka-clients releases, fetched once into
~/.cache/kafka-gateway/jars) and a JDK (javac compiles the ApiKeys dump); without them it
skips. The first run fetches the jars (minutes); later runs take about 20 seconds.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.harness.tools import find_tool, missing_tool_reason

ROOT = Path(__file__).resolve().parents[4]
DATA = ROOT / "gateway" / "data"


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text("utf-8"))


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a first run fetches every release's jar with mvn
def test_committed_data_is_what_the_script_makes() -> None:
    for tool in ("mvn", "javac"):  # javac comes with java (the JDK)
        if find_tool(tool) is None:
            pytest.skip(missing_tool_reason(tool, "scripts/kafka-protocol --check needs it"))
    done = subprocess.run(
        [str(ROOT / "scripts" / "kafka-protocol"), "--check"],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (
        "the committed gateway/data/kafka_*.json differ from what scripts/kafka-protocol makes "
        f"(run it and commit):\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    )


def test_every_output_names_the_releases_it_read() -> None:
    stamps = {
        name: (data["kafka"], data["releases"])
        for name in ("kafka_protocol.json", "kafka_messages.json", "kafka_releases.json")
        for data in [load(name)]
    }
    assert len(set(map(str, stamps.values()))) == 1, stamps
    newest, releases = stamps["kafka_protocol.json"]
    assert releases[-1] == newest


def test_protocol_table_facts() -> None:
    apis = load("kafka_protocol.json")["apis"]
    produce = apis["0"]
    assert produce["name"] == "Produce"
    assert produce["versions"] == [0, 13]  # v0-2 from 3.9, v3-13 from 4.4 (KIP-896)
    assert produce["flexible_from"] == 9
    assert produce["listeners"] == ["broker", "zkBroker"]
    api_versions = apis["18"]
    assert api_versions["same_layout"]["response"]["5"] == 3  # v4 and v5 read like v3
    assert apis["17"]["flexible_from"] is None  # SaslHandshake is never flexible
    for key, api in apis.items():
        low, high = api["versions"]
        assert low <= high, key
        for side in ("request", "response"):
            for version, lower in api["same_layout"][side].items():
                assert low <= lower < int(version) <= high, (key, side, version)


def test_messages_cover_each_version_once() -> None:
    messages = load("kafka_messages.json")["messages"]
    apis = load("kafka_protocol.json")["apis"]
    assert {"RequestHeader", "ResponseHeader"} <= set(messages)
    # Renamed messages are one message under the newest name (ElectPreferredLeaders 2.2-2.3
    # is ElectLeaders v0; ListOffset, AlterIsr, ListClientMetricsResources likewise).
    assert apis["43"]["name"] == "ElectLeaders" and apis["43"]["versions"] == [0, 2]
    for old in ("ElectPreferredLeaders", "ListOffset", "AlterIsr", "ListClientMetricsResources"):
        assert old + "Request" not in messages
    for api in apis.values():
        for side in ("Request", "Response"):
            entries = messages[api["name"] + side]
            covered = [v for e in entries for v in range(e["versions"][0], e["versions"][1] + 1)]
            assert covered == list(range(api["versions"][0], api["versions"][1] + 1))
    produce = messages["ProduceRequest"]
    assert [(e["versions"], e["release"]) for e in produce] == [
        ([0, 2], "3.9.2"),
        ([3, 13], "4.4.0"),
    ]
