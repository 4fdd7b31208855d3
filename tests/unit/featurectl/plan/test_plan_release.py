"""``featurectl plan --release``: what a Kafka release refuses, which library release
speaks what a client needs, the verdicts, gateways, features, steps and reports
(plain Python, no Spark)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from featurectl.plan import identities as ids
from featurectl.plan import readiness as rd
from featurectl.plan.job import _check_releases
from featurectl.plan.libraries import first_release, library_of
from featurectl.plan.model import PlanData, PlanInputs, UsageError
from featurectl.plan.report import plan_document
from featurectl.plan.report_html import render_html
from featurectl.plan.report_md import render_markdown
from gateway.commands import shell_command
from gateway.features.catalogue import load_catalogue
from gateway.versions import accepted_versions, release_named
from tests.harness.shell import command_problem, simple_commands

CATALOGUE = load_catalogue(None)
T0 = 1_736_121_600_000
STATE_DOC = {"zookeeper": "zk-0:2181", "chroot": "/kafka-gateway", "source": "snapshot",
             "epoch": 1, "gateway_ids": ["gw-a", "gw-b", "gw-c"], "time_ms": T0}  # fmt: skip
SUPPORT = [(g, f, 0, 1) for g in ("gw-a", "gw-b") for f in CATALOGUE] + [
    ("gw-c", f, 0, 1)
    for f in CATALOGUE
    if f != "kraft.version"  # an older catalogue
]
STATE = SimpleNamespace(doc=STATE_DOC, support=SUPPORT, finalized={})

PINNED_PYTHON = ("client-id:kafka-python-2.0.2", "unknown")  # api_version=(0, 10)
FALLBACK_RDKAFKA = ("client-id:rdkafka", "unknown")  # api.version.request=false
JAVA = ("apache-kafka-java", "3.9.1")


def use(client: tuple[str, str], api_key: int, api: str, version: int, n: float = 10.0) -> dict:
    return {"client_software_name": client[0], "client_software_version": client[1],
            "api_key": api_key, "api": api, "api_version": version, "requests": n,
            "first_seen": T0, "last_seen": T0 + 60_000, "gateways": ["gw-a"]}  # fmt: skip


USAGE = [
    use(PINNED_PYTHON, 0, "Produce", 2),
    use(PINNED_PYTHON, 1, "Fetch", 2),
    use(PINNED_PYTHON, 3, "Metadata", 1),
    use(FALLBACK_RDKAFKA, 0, "Produce", 2, 5.0),
    use(JAVA, 18, "ApiVersions", 3),
    use(JAVA, 0, "Produce", 11, 100.0),
    use(JAVA, 1, "Fetch", 17, 100.0),
]
INDEX = ids.identity_index(
    [{"gateway_id": "gw-a", "identity": PINNED_PYTHON[0], "identity_version": "unknown",
      "client_id": "kafka-python-2.0.2", "peers": ["10.0.0.7"], "connections_opened": 4}]
)  # fmt: skip
GATEWAYS = [
    {"gateway_id": "gw-a", "gateway_version": "0.9.0", "protocol_kafka": "4.4.0"},
    {"gateway_id": "gw-b", "gateway_version": "0.8.0", "protocol_kafka": "3.9.2"},
    {"gateway_id": "gw-c", "gateway_version": "0.7.0", "protocol_kafka": None},
]


def test_kafka_4_refuses_produce_v0_2_although_it_advertises_them() -> None:
    four = release_named("4.0")
    assert four.versions[0][0] == 0  # advertised from v0 (KAFKA-18659) ...
    assert accepted_versions(four)[0][0] == 3  # ... refused below v3 (KIP-896)
    assert accepted_versions(release_named("3.9"))[0] == release_named("3.9").versions[0]
    assert rd.refused_by("4.0", 0, 2) == {"why": "below minimum", "accepted": [3, 12], "needs": 3}
    assert rd.refused_by("4.0", 1, 3)["needs"] == 4  # Fetch below v4
    assert rd.refused_by("4.0", 3, 0) is None  # Metadata v0 stays
    assert rd.refused_by("3.9", 0, 0) is None
    assert rd.refused_by("4.0", 7, 3)["why"] == "lacks"  # ControlledShutdown: KRaft has none
    assert rd.refused_by("4.0", 0, 99) is None  # too new: the client negotiates down


def test_libraries_from_software_names_and_client_ids_with_their_first_releases() -> None:
    assert library_of(*PINNED_PYTHON) == library_of("kafka-python", "2.0.2").__class__(
        "kafka-python", "2.0.2", guessed=True
    )
    assert library_of("librdkafka", "2.6.1").name == "librdkafka"
    assert library_of(*FALLBACK_RDKAFKA).version is None
    assert library_of("client-id:my-app", "unknown") is None
    java = first_release("apache-kafka-java", 0, 3)
    assert java is not None and java.since == "0.11.0.0" and not java.approximate
    rdkafka = first_release("librdkafka", 0, 3)
    assert rdkafka is not None and rdkafka.since == "0.11.0"
    sarama = first_release("sarama", 2, 1)  # no row: KIP-896's reference release
    assert sarama is not None and sarama.at_the_latest and sarama.since == "1.30.1"
    assert sarama.text() == "at the latest 1.30.1 (kip896)"
    assert first_release("aiokafka", 2, 1) is None  # the table does not say: no guess


def test_old_clients_break_on_4_0_with_the_version_they_need_and_the_remedy() -> None:
    clients = rd.client_readiness("4.0", USAGE, INDEX)
    verdicts = {c["client_software_name"]: c["verdict"] for c in clients}
    assert verdicts == {
        PINNED_PYTHON[0]: "breaks on 4.0",
        FALLBACK_RDKAFKA[0]: "breaks on 4.0",
        JAVA[0]: "works",
    }
    python = next(c for c in clients if c["client_software_name"] == PINNED_PYTHON[0])
    assert [(r["api"], r["api_version"], r["needs"]) for r in python["refused"]] == [
        ("Produce", 2, 3),
        ("Fetch", 2, 4),
    ]
    assert python["client_ids"] == ["kafka-python-2.0.2"] and python["peers"] == ["10.0.0.7"]
    # kafka-python 2.0.2 speaks Produce v3 already: it is pinned, not old.
    assert "it is pinned; leave api_version unset" in python["refused"][0]["remedy"]
    rdkafka = next(c for c in clients if c["client_software_name"] == FALLBACK_RDKAFKA[0])
    assert "upgrade librdkafka to 0.11.0" in rdkafka["refused"][0]["remedy"]
    assert "api.version.request=true" in rdkafka["refused"][0]["remedy"]
    # 3.9 refuses none of it.
    assert {c["verdict"] for c in rd.client_readiness("3.9", USAGE, INDEX)} == {"works"}
    # The bridge's verdict is reserved: given only for clients counted as bridged.
    bridged = rd.client_readiness("4.0", USAGE, INDEX, frozenset({FALLBACK_RDKAFKA}))
    assert {c["verdict"] for c in bridged} == {"breaks on 4.0", "works", rd.BRIDGED}


def test_gateways_too_old_for_the_release_and_steps_in_order() -> None:
    plan = rd.readiness("4.0", USAGE, INDEX, GATEWAYS, STATE, CATALOGUE)
    assert not plan["safe"] and plan["kafka"] == "4.0.2"
    ready = {g["gateway_id"]: (g["ready"], g["problems"]) for g in plan["gateways"]}
    assert ready["gw-a"] == (True, [])
    assert ready["gw-b"] == (False, ["its protocol data is from Kafka 3.9.2, older than 4.0"])
    assert ready["gw-c"][1][0].startswith("does not say which Kafka")
    assert ready["gw-c"][1][1] == "its catalogue lacks kraft.version"
    features = {f["feature"]: f for f in plan["features"]}
    assert set(features) == {"group.version", "kraft.version", "transaction.version"}
    assert features["transaction.version"]["to"] == 2
    # Produce v12 needs transaction.version 2: every Produce client may renegotiate.
    assert "apache-kafka-java 3.9.1" in features["transaction.version"]["clients"]
    kinds = [s["kind"] for s in plan["steps"]]
    assert kinds == ["move client", "move client", "upgrade gateway", "upgrade gateway",
                     "roll brokers", "finalize"]  # fmt: skip
    featurectl = shell_command("featurectl")
    assert plan["steps"][-1]["command"] == (
        f"{featurectl} upgrade --zookeeper zk-0:2181 --release-version 4.0"
    )
    assert plan["steps"][0]["command"].endswith(
        "plan --metrics metrics-recheck --zookeeper zk-0:2181 --release 4.0"
    )
    assert (
        "client-id:kafka-python-2.0.2 unknown (kafka-python-2.0.2; 10.0.0.7)"
        in (plan["steps"][0]["action"])
    )
    # Pasted into a new shell in the repository root: found, and featurectl's parsers
    # accept every argument (the re-plan is a collect and a plan).
    for step in plan["steps"]:
        words = simple_commands(step["command"])
        assert [command_problem(w) for w in words] == [None] * len(words), step
    # Nothing old in use and every gateway current: safe, the roll and the finalize only.
    modern = rd.readiness("4.0", USAGE[4:], INDEX, GATEWAYS[:1], STATE, CATALOGUE)
    assert modern["safe"] and [s["kind"] for s in modern["steps"]] == ["roll brokers", "finalize"]


def test_a_client_the_bridge_carries_works_only_through_it_and_moves_nothing() -> None:
    # librdkafka's records say the version bridge carried its requests (it is in front
    # of a Kafka 4.x already): not a client to move, but one that needs the bridge.
    index = {
        **INDEX,
        **ids.identity_index(
            [{"gateway_id": "gw-a", "identity": FALLBACK_RDKAFKA[0], "identity_version":
              "unknown", "client_id": "rdkafka", "bridged_requests": 12}]
        ),
    }  # fmt: skip
    plan = rd.readiness("4.0", USAGE, index, GATEWAYS[:1], STATE, CATALOGUE)
    verdicts = {c["client_software_name"]: c["verdict"] for c in plan["clients"]}
    assert verdicts[FALLBACK_RDKAFKA[0]] == rd.BRIDGED
    assert verdicts[PINNED_PYTHON[0]] == "breaks on 4.0"
    moves = [s["action"] for s in plan["steps"] if s["kind"] == "move client"]
    assert len(moves) == 1 and moves[0].startswith(PINNED_PYTHON[0])


def test_release_arguments_read_as_kafka_features_writes_them() -> None:
    assert _check_releases(["4.0.1", "4.1"]) == ("4.0", "4.1")
    with pytest.raises(UsageError, match=r"unknown Apache Kafka release .9\.9."):
        _check_releases(["9.9"])
    with pytest.raises(UsageError, match=r"names 4\.0 twice"):
        _check_releases(["4.0", "4.0.2"])


def test_reports_have_the_release_readiness_section_and_chart(tmp_path: Path) -> None:
    from featurectl.plan.charts import render_charts

    plan = rd.readiness("4.0", USAGE, INDEX, GATEWAYS, STATE, CATALOGUE)
    data = PlanData(
        dataset={"path": "m/", "samples": 10, "planner_samples": 10, "gateways": 1,
                 "scrapes": 5, "start_ms": T0, "end_ms": T0 + 60_000,
                 "gateway_spans": [{"gateway_id": "gw-a", "first_ms": T0,
                                    "last_ms": T0 + 60_000, "scrapes": 5}]},
        state=STATE_DOC, features=[], verdicts=[], blockers=[], clients=[], usage=USAGE,
        connections_series=[], gated_series=[], timings={"total": 1.0}, releases=[plan],
    )  # fmt: skip
    charts = [p.relative_to(tmp_path).as_posix() for p in render_charts(data, tmp_path / "c")]
    assert "c/release_4.0.png" in charts
    doc = plan_document(PlanInputs(metrics="m/", catalogue=CATALOGUE, targets={}), data, [], charts)
    assert doc["releases"][0]["release"] == "4.0"
    md = render_markdown(doc)
    assert "## Kafka 4.0 readiness" in md
    assert "**Not safe yet: 2 client(s) break on 4.0, 2 gateway(s) to upgrade first.**" in md
    assert (
        "| client-id:kafka-python-2.0.2 unknown | kafka-python 2.0.2 | kafka-python-2.0.2 |" in md
    )
    assert "Produce v2 → v3 (10 requests); Fetch v2 → v4 (10 requests)" in md
    assert "| gw-b | 0.8.0 | 3.9.2 | no |" in md
    assert "--release-version 4.0" in md
    html = render_html(doc, tmp_path)
    assert 'id="release-4.0"' in html and "Kafka 4.0 readiness" in html
