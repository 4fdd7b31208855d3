"""Who the plan names (plain Python, no Spark): clients broken now, clients that want a
feature, what a target takes from whom and the right remedy, why a level is capped,
the steps' order, the reports' new sections and the charts' time axis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from featurectl.plan import caps
from featurectl.plan import clients as cl
from featurectl.plan import identities as ids
from featurectl.plan.model import PlanData, PlanInputs
from featurectl.plan.report import plan_document
from featurectl.plan.report_md import render_markdown
from featurectl.plan.steps import build_steps, dependency_order
from gateway.features.catalogue import load_catalogue, parse_catalogue

CATALOGUE = load_catalogue(None)
STATE = {"zookeeper": "zk-0:2181", "chroot": "/kafka-gateway"}
T0 = 1_736_121_600_000

KAFKA_PYTHON = {"client_software_name": "kafka-python", "client_software_version": "2.0.2"}
LIBRDKAFKA = {"client_software_name": "librdkafka", "client_software_version": "2.6.1"}


def refusal(client: dict, api_key: int, api: str, version: int, reason: str, n: float) -> dict:
    return {
        **client,
        "reason": reason,
        "api_key": api_key,
        "api": api,
        "api_version": version,
        "requests": n,
        "first_seen": T0,
        "last_seen": T0 + 60_000,
        "gateways": ["gw-a"],
    }


def features(**cluster_max: int) -> list[dict[str, Any]]:
    return [{"feature": f, "cluster_max_level": m} for f, m in cluster_max.items()]


IDENTITIES = [
    {
        "gateway_id": "gw-a",
        "software_name": "kafka-python",
        "software_version": "2.0.2",
        "client_id": "legacy-producer",
        "identity": "kafka-python",  # the labels it is counted under (KIP-511 here)
        "identity_version": "2.0.2",
        "fingerprint": "f00d",
        "peers": ["10.0.0.7", "10.0.0.8"],
        "principals": ["User:legacy", "User:ops"],
        "principal_connections": [1, 299],
        "connections_opened": 300,
        "first_seen": "2025-01-06T00:00:20Z",
        "last_seen": T0 + 50_000,
        "versions_used": [{"api_key": 18, "api": "ApiVersions", "api_version": 0, "count": 300}],
        "versions_refused": [
            {"api_key": 0, "api": "Produce", "api_version": 2, "reason": "unsupported_version",
             "count": 300}
        ],
    }
]  # fmt: skip


def test_a_pinned_old_client_is_broken_now_and_a_kip848_consumer_wants_group_version() -> None:
    index = ids.identity_index(IDENTITIES)
    usage = [{"api_key": 0, "api": "Produce", "api_version": v} for v in (7, 9, 11)]
    refusals = [
        refusal(KAFKA_PYTHON, 0, "Produce", 2, "unsupported_version", 300.0),
        refusal(LIBRDKAFKA, 68, "ConsumerGroupHeartbeat", 0, "gated_by_feature", 40.0),
        {**refusal({}, -1, "Unknown", -1, "oversize_frame", 2.0), **dict.fromkeys(
            ("client_software_name", "client_software_version"))},
    ]  # fmt: skip
    broken, wanting = cl.classify_refusals(
        refusals, CATALOGUE, {}, features(**{"group.version": 1}), usage, index, STATE
    )
    assert [(b["client_software_name"], b["api"], b["reason"]) for b in broken] == [
        ("kafka-python", "Produce", "unsupported_version"),
        (None, "Unknown", "oversize_frame"),
    ]
    old = broken[0]
    assert old["client_ids"] == ["legacy-producer"] and old["peers"] == ["10.0.0.7", "10.0.0.8"]
    assert old["principals"] == ["User:ops", "User:legacy"]  # most connections first
    assert "older than the brokers behind the gateway accept (others use v7-v11)" in old["remedy"]
    assert "upgrade the library or unpin" in old["remedy"] and "api_version unset" in old["remedy"]
    assert broken[1]["remedy"] == cl.UNATTRIBUTED
    (wants,) = wanting
    assert (wants["feature"], wants["level"]) == ("group.version", 1)
    assert wants["command"].endswith("finalize --zookeeper zk-0:2181 --feature group.version=1")

    # Capped everywhere: what it takes is the brokers first, and no command.
    _, wanting = cl.classify_refusals(
        refusals[1:2], CATALOGUE, {}, features(**{"group.version": 0}), usage, index, STATE
    )
    assert wanting[0]["command"] is None
    assert "upgrade the gateways that lack it" in wanting[0]["remedy"]


def test_refusals_come_from_the_client_records_when_the_counter_has_only_a_reason() -> None:
    (row,) = ids.refusals_from_identities(IDENTITIES)
    assert (row["api"], row["api_version"], row["reason"], row["requests"]) == (
        "Produce",
        2,
        "unsupported_version",
        300.0,
    )
    assert row["first_seen"] == T0 + 20_000 and row["gateways"] == ["gw-a"]


def gated(feature: str, level: int, client: dict, api_key: int, api: str, version: int) -> dict:
    return {
        **client,
        "feature": feature,
        "level": level,
        "api_key": api_key,
        "api": api,
        "api_version": version,
        "requests": 100.0,
        "connections_now": 2.0,
        "connections_peak": 3.0,
        "first_seen": T0,
        "last_seen": T0,
        "gateways": ["gw-a"],
    }


def verdict(feature: str, level: int, current: int, kind: str, users: list) -> dict:
    return {
        "feature": feature,
        "level": level,
        "current_level": current,
        "kind": kind,
        "safe": not users,
        "blocking_gateways": [],
        "blocking_clients": users,
        "blocking_requests": 100.0 * len(users),
    }


def test_a_client_that_can_renegotiate_reconnects_one_that_loses_the_api_must_move() -> None:
    rows = [
        gated("transaction.version", 2, LIBRDKAFKA, 0, "Produce", 12),
        gated("group.version", 1, LIBRDKAFKA, 68, "ConsumerGroupHeartbeat", 0),
    ]
    verdicts = [
        verdict("transaction.version", 1, 2, "downgrade", [LIBRDKAFKA]),
        verdict("group.version", 0, 1, "disable", [LIBRDKAFKA]),
    ]
    cl.annotate_verdicts(verdicts, rows, CATALOGUE, {})
    produce, heartbeat = verdicts
    (lost,) = produce["losses"]
    assert (lost["remedy"], lost["versions"], lost["allowed_max"]) == ("reconnect", [12], 11)
    assert produce["safe"] and produce["blocking_clients"] == []
    assert produce["reconnecting_clients"] == [LIBRDKAFKA]
    assert heartbeat["losses"][0]["remedy"] == "switch" and not heartbeat["safe"]

    steps = build_steps(verdicts, [], rows, STATE)
    kinds = [(s["feature"], s["kind"]) for s in steps]
    # The safe downgrade first; the reconnect is a note, not work; the disable needs a move.
    assert kinds == [
        ("transaction.version", "note"),
        ("transaction.version", "command"),
        ("group.version", "manual"),
        ("group.version", "check"),
        ("group.version", "command"),
    ]
    assert cl.RECONNECT in steps[0]["action"] and "Produce v12 → v11 or lower" in steps[0]["action"]
    assert "upgrade" not in steps[0]["action"]
    assert "group.protocol=classic" in steps[2]["action"]


def test_steps_follow_feature_dependencies_then_risk() -> None:
    needs = {("b.version", 1): {"a.version": 1}}.get

    def lookup(feature: str, level: int) -> dict:
        return needs((feature, level)) or {}

    up = [
        verdict("b.version", 1, 0, "upgrade", []),
        verdict("a.version", 1, 0, "upgrade", []),
        verdict("c.version", 1, 0, "upgrade", []),
    ]
    up[2]["safe"] = False
    assert [v["feature"] for v in dependency_order(up, lookup)] == [
        "a.version",
        "b.version",
        "c.version",
    ]
    # Going down, what needs a feature goes down before it.
    down = [verdict("a.version", 0, 1, "disable", []), verdict("b.version", 0, 1, "disable", [])]
    assert [v["feature"] for v in dependency_order(down, lookup)] == ["b.version", "a.version"]
    # Kafka's own table: eligible.leader.replicas.version 1 needs metadata.version 23.
    elr = [verdict("eligible.leader.replicas.version", 1, 0, "upgrade", [])]
    (step,) = build_steps(elr, [], [], STATE)
    assert "metadata.version >= 23" in step["action"]


def test_a_capped_level_names_the_api_versions_the_upstream_lacks() -> None:
    blocker = {
        "feature": "group.version",
        "level": 1,
        "gateway_id": "gw-b",
        "min_level": 0,
        "max_level": 0,
    }
    registrations = {"gw-b": {"upstream": "broker-b:9093", "broker_software": "apache-kafka 3.9"}}
    seen = [refusal(LIBRDKAFKA, 68, "ConsumerGroupHeartbeat", 0, "unsupported_version", 5.0)]
    seen[0]["gateways"] = ["gw-b"]
    reason = caps.cap_reason(blocker, CATALOGUE, registrations, seen)
    assert reason == (
        "supports 0-0: its upstream (apache-kafka 3.9, at broker-b:9093) does not offer at "
        "least one of ConsumerGroupHeartbeat, ConsumerGroupDescribe (any version), which "
        "group.version=1 needs; clients were refused ConsumerGroupHeartbeat v0 there"
    )
    one = parse_catalogue({"features": {"t.version": {"levels": {"1": ["Produce>=12"]}}}})
    reason = caps.cap_reason({**blocker, "feature": "t.version"}, one, {})
    assert reason == (
        "supports 0-0: its upstream does not offer Produce v12+, which t.version=1 needs"
    )


def test_a_level_capped_by_the_gateways_own_catalogue_says_so_not_its_upstream() -> None:
    """As gw-b in test_plan_e2e: its catalogue stops at level 1 while gw-a, through the
    same broker, supports level 2; or a catalogue without the feature at all."""
    two = parse_catalogue(
        {
            "features": {
                "t.version": {"levels": {"1": ["DescribeCluster>=1"], "2": ["Metadata>=12"]}}
            }
        }
    )
    blocker = {"feature": "t.version", "level": 2, "gateway_id": "gw-b", "min_level": 0,
               "max_level": 1}  # fmt: skip
    registrations = {
        "gw-a": {"upstream": "broker:9092", "broker_software": "tansu 0.5"},
        "gw-b": {"upstream": "broker:9092", "broker_software": "tansu 0.5"},
        "gw-c": {"upstream": "other:9092", "broker_software": "tansu 0.5"},
    }
    support = [("gw-a", "t.version", 0, 2), ("gw-b", "t.version", 0, 1)]
    fields = caps.cap_fields(blocker, two, registrations, (), support)
    assert fields == {
        "reason": "supports 0-1: its own catalogue caps it, not its upstream (gw-a supports "
        "t.version=2 through the same upstream); t.version=2 needs Metadata v12+",
        "lacks": "Metadata v12+",
        "cap": caps.CATALOGUE,
    }
    # Another upstream running the same broker software offers the same API versions.
    support = [("gw-c", "t.version", 0, 2), ("gw-b", "t.version", 0, 1)]
    assert "(gw-c supports t.version=2 in front of the same tansu 0.5)" in caps.cap_reason(
        blocker, two, registrations, (), support
    )
    # Nobody through the same upstream or software supports more: the upstream, as before.
    unknown = {k: {**r, "broker_software": "unknown unknown"} for k, r in registrations.items()}
    fields = caps.cap_fields(blocker, two, unknown, (), support)
    assert fields["cap"] == caps.UPSTREAM
    assert fields["reason"] == (
        "supports 0-1: its upstream (unknown unknown, at broker:9092) does not offer "
        "Metadata v12+, which t.version=2 needs"
    )
    # A gateway lists every feature of its catalogue: one that does not has it in none.
    fields = caps.cap_fields({**blocker, "min_level": None, "max_level": None}, two, {})
    assert fields["cap"] == caps.CATALOGUE
    assert fields["reason"] == (
        "does not list the feature, so supports level 0 only: its own catalogue caps it, "
        "not its upstream (the catalogue has no t.version); t.version=2 needs at least one "
        "of DescribeCluster v1+, Metadata v12+"
    )


def test_versions_by_client_takes_first_seen_from_the_records() -> None:
    usage = [
        {**KAFKA_PYTHON, "api_key": 18, "api": "ApiVersions", "api_version": 0,
         "requests": 300.0, "first_seen": T0, "last_seen": T0 + 40_000, "gateways": ["gw-a"]},
        {**LIBRDKAFKA, "api_key": 0, "api": "Produce", "api_version": 12,
         "requests": 900.0, "first_seen": T0, "last_seen": T0 + 60_000, "gateways": ["gw-a"]},
    ]  # fmt: skip
    refused = [refusal(KAFKA_PYTHON, 0, "Produce", 2, "unsupported_version", 300.0)]
    rows = cl.versions_by_client(usage, {(0, 12)}, ids.identity_index(IDENTITIES), refused)
    assert [r["client_software_name"] for r in rows] == ["librdkafka", "kafka-python"]
    assert rows[0]["apis"] == [{"api": "Produce", "api_key": 0, "versions": ["12*"]}]
    old = rows[1]
    assert old["first_seen"] == T0 + 20_000 and old["last_seen"] == T0 + 50_000
    assert old["refused"] == ["Produce v2 (unsupported_version)"]
    assert old["client_ids"] == ["legacy-producer"]


def test_report_md_has_broken_now_wanting_losses_and_the_version_table(tmp_path: Path) -> None:
    index = ids.identity_index(IDENTITIES)
    refusals = [
        refusal(KAFKA_PYTHON, 0, "Produce", 2, "unsupported_version", 300.0),
        refusal(LIBRDKAFKA, 68, "ConsumerGroupHeartbeat", 0, "gated_by_feature", 40.0),
    ]
    usage = [
        {**LIBRDKAFKA, "api_key": 0, "api": "Produce", "api_version": 12,
         "requests": 900.0, "first_seen": T0, "last_seen": T0 + 60_000, "gateways": ["gw-a"]},
    ]  # fmt: skip
    broken, wanting = cl.classify_refusals(
        refusals, CATALOGUE, {}, features(**{"group.version": 1}), usage, index, STATE
    )
    rows = [gated("transaction.version", 2, LIBRDKAFKA, 0, "Produce", 12)]
    verdicts = [verdict("transaction.version", 1, 2, "downgrade", [LIBRDKAFKA])]
    cl.annotate_verdicts(verdicts, rows, CATALOGUE, index)
    data = PlanData(
        dataset={"path": "m/", "samples": 10, "planner_samples": 10, "gateways": 1,
                 "scrapes": 5, "start_ms": T0, "end_ms": T0 + 60_000,
                 "gateway_spans": [{"gateway_id": "gw-a", "first_ms": T0,
                                    "last_ms": T0 + 60_000, "scrapes": 5}]},
        state={**STATE, "source": "snapshot", "epoch": 3, "gateway_ids": ["gw-a"],
               "time_ms": T0},
        features=[], verdicts=verdicts, blockers=[], clients=rows, usage=usage,
        connections_series=[], gated_series=[], timings={"total": 1.0},
        refusals=refusals, broken_now=broken, wanting=wanting,
        versions_by_client=cl.versions_by_client(usage, {(0, 12)}, index, refusals),
        identities=1,
    )  # fmt: skip
    inputs = PlanInputs(metrics="m/", catalogue=CATALOGUE, targets={"transaction.version": 1})
    steps = build_steps(data.verdicts, [], data.clients, data.state)
    md = render_markdown(plan_document(inputs, data, steps, []))
    for heading in (
        "## Broken now",
        "## Clients that want a feature they cannot get",
        "## Who loses what, per target",
        "## API versions by client",
    ):
        assert heading in md, heading
    row = "| kafka-python 2.0.2 | legacy-producer | 10.0.0.7, 10.0.0.8 | User:ops, User:legacy |"
    assert row + " Produce | 2 |" in md
    assert "| librdkafka 2.6.1 | - | - | - | ConsumerGroupHeartbeat | 0 | gated_by_feature |" in md
    assert "| librdkafka 2.6.1 | - | - | - | Produce 12* | 900 |" in md
    assert "v11 and lower" in md and cl.RECONNECT in md


def test_the_broken_and_wanting_tables_columns_cell_by_cell() -> None:
    from featurectl.plan.sections import broken_table, wanting_table

    index = ids.identity_index(IDENTITIES)
    refusals = [
        refusal(KAFKA_PYTHON, 0, "Produce", 2, "unsupported_version", 300.0),
        refusal(LIBRDKAFKA, 68, "ConsumerGroupHeartbeat", 0, "gated_by_feature", 1234.0),
        {**refusal({}, -1, "Unknown", -1, "oversize_frame", 2.0), **dict.fromkeys(
            ("client_software_name", "client_software_version", "api"))},
    ]  # fmt: skip
    broken, wanting = cl.classify_refusals(
        refusals, CATALOGUE, {}, features(**{"group.version": 1}), [], index, STATE
    )
    broken[0]["client_ids"] = ["a", "b", "c", "d", "e"]  # more than the table shows
    shared = ["client software", "client ids", "addresses", "principals", "API", "version",
              "reason", "refused"]  # fmt: skip
    header, rows = broken_table(broken)
    assert header == [*shared, "gateways", "last refused", "remedy"]
    assert rows == [
        ("kafka-python 2.0.2", "a, b, c (+2)", "10.0.0.7, 10.0.0.8", "User:ops, User:legacy",
         "Produce", 2, "unsupported_version", "300", "gw-a", T0 + 60_000, broken[0]["remedy"]),
        ("(not labelled)", "-", "-", "-", "-", "-", "oversize_frame", "2", "gw-a", T0 + 60_000,
         cl.UNATTRIBUTED),
    ]  # fmt: skip
    header, rows = wanting_table([*wanting, {**wanting[0], "command": None}])
    assert header == [*shared, "needs", "what it takes", "command"]
    want = ("librdkafka 2.6.1", "-", "-", "-", "ConsumerGroupHeartbeat", 0, "gated_by_feature",
            "1,234", "group.version=1", wanting[0]["remedy"])  # fmt: skip
    assert rows == [(*want, wanting[0]["command"]), (*want, "-")]
    assert wanting[0]["command"].endswith("--feature group.version=1")


def test_chart_ticks_read_differently_on_a_one_minute_window() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from featurectl.plan.charts import _time_axis, time_format

    assert time_format(60)[0] == "%H:%M:%S"
    assert time_format(6 * 3600)[0] == "%H:%M"
    assert time_format(7 * 86400)[0] == "%m-%d %H:%M"
    start = datetime(2025, 1, 6, 10, 0, tzinfo=UTC)
    times = [start + timedelta(seconds=s) for s in range(0, 61, 5)]
    fig, ax = plt.subplots()
    ax.plot(times, range(len(times)))
    _time_axis(ax, times)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    plt.close(fig)
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
    assert all(label.startswith("10:0") for label in labels), labels


def test_client_records_are_read_when_the_reader_exists_and_missing_is_none(
    monkeypatch: Any, tmp_path: Path
) -> None:
    from featurectl.plan import readers

    monkeypatch.delattr(readers, "read_clients", raising=False)
    assert ids.load_identities(str(tmp_path)) == []  # a build without the reader

    def missing(_: str) -> list:
        raise FileNotFoundError("no clients/")

    monkeypatch.setattr(readers, "read_clients", missing, raising=False)
    assert ids.load_identities(str(tmp_path)) == []
    monkeypatch.setattr(readers, "read_clients", lambda d: IDENTITIES, raising=False)
    assert ids.load_identities(str(tmp_path)) == IDENTITIES
    assert ids.to_ms("2025-01-06T00:00:20Z") == T0 + 20_000 == ids.to_ms((T0 + 20_000) / 1000)


def test_gateways_capped_alike_are_named_together() -> None:
    lacks = "at least one of Produce v12+, TxnOffsetCommit v5+, EndTxn v5+"
    rows = [
        {"gateway_id": g, "min_level": 0, "max_level": 1, "lacks": lacks}
        for g in ("gw-002", "gw-000", "gw-001")
    ]
    assert caps.capped_summary(rows, "transaction.version", 2) == (
        "gw-000, gw-001, gw-002 support 0-1: their upstreams do not offer at least one of "
        "Produce v12+, TxnOffsetCommit v5+, EndTxn v5+, which transaction.version=2 needs"
    )
    own = [{**rows[0], "gateway_id": "gw-009", "cap": caps.CATALOGUE}]
    assert caps.capped_summary(rows + own, "transaction.version", 2).endswith(
        "; gw-009 support 0-1: their own catalogues cap them, not their upstreams; "
        "transaction.version=2 needs at least one of Produce v12+, TxnOffsetCommit v5+, "
        "EndTxn v5+"
    )
    verdicts = [verdict("transaction.version", 2, 1, "upgrade", [])]
    verdicts[0].update(safe=False, blocking_gateways=["gw-000", "gw-001", "gw-002"])
    blockers = [{**r, "feature": "transaction.version", "level": 2} for r in rows]
    manual = build_steps(verdicts, blockers, [], STATE)[0]
    assert manual["action"].endswith(
        "until each supports transaction.version=2: gw-000, gw-001, gw-002 support 0-1: their "
        "upstreams do not offer at least one of Produce v12+, TxnOffsetCommit v5+, EndTxn v5+, "
        "which transaction.version=2 needs."
    )


def test_a_too_new_api_versions_retried_lower_is_negotiation_not_broken_now() -> None:
    # The README walkthrough: Kafka's 4.4 tools send ApiVersions v5, are answered the
    # KIP-511 way and retry lower on the same connection. The refusal is counted under
    # "unknown unknown" (the request's software fields are not read at a version the
    # gateway does not take), while the same tools' traffic has its own labels.
    unknown = {"client_software_name": "unknown", "client_software_version": "unknown"}
    java = {"client_software_name": "apache-kafka-java", "client_software_version": "4.4.0"}
    refusals = [
        refusal(unknown, 18, "ApiVersions", 5, "unsupported_version", 6.0),
        refusal(KAFKA_PYTHON, 0, "Produce", 2, "unsupported_version", 3.0),
    ]
    usage = [
        {**java, "api_key": 18, "api": "ApiVersions", "api_version": 4, "requests": 6.0},
        {**unknown, "api_key": 18, "api": "ApiVersions", "api_version": 4, "requests": 1.0},
    ]
    broken, wanting = cl.classify_refusals(refusals, CATALOGUE, {}, [], usage, {}, STATE)
    assert [(b["api"], b["api_version"]) for b in broken] == [("Produce", 2)] and not wanting
    assert [(n["api"], n["requests"]) for n in cl.negotiated(refusals)] == [("ApiVersions", 6.0)]
    table = cl.versions_by_client(usage, set(), {}, refusals)
    assert all(row["refused"] == [] for row in table)

    from featurectl.plan.sections import notes

    doc = {
        "state": {"source": "snapshot"},
        "identities": 1,
        "dataset": {"gateway_spans": []},
        "negotiated": cl.negotiated(refusals),
    }
    (said,) = notes(doc)
    assert said.startswith("6 ApiVersions requests newer than the gateways answer")
    assert "negotiation, not breakage" in said and "unknown unknown" in said
