"""The planner's steps and commands (plain Python over collected results, no Spark)."""

from __future__ import annotations

from typing import Any

from featurectl.plan.command_lines import collect_again_command, featurectl_command
from featurectl.plan.sections import feature_table, withheld_notes
from featurectl.plan.steps import build_steps
from gateway.commands import shell_command
from tests.harness.shell import command_problem, simple_commands

# How the plan's commands name featurectl, run from here (gateway.commands).
FEATURECTL = shell_command("featurectl")

STATE = {"zookeeper": "zk-0:2181", "chroot": "/kafka-gateway"}


def verdict(feature: str, level: int, current: int, kind: str, safe: bool, **extra: Any) -> dict:
    return {
        "feature": feature,
        "level": level,
        "current_level": current,
        "kind": kind,
        "safe": safe,
        "blocking_gateways": extra.get("gateways", []),
        "blocking_clients": extra.get("clients", []),
        "blocking_requests": 0.0,
    }


def client(feature: str, level: int, name: str, version: str, requests: float) -> dict:
    return {
        "feature": feature,
        "level": level,
        "api": "ConsumerGroupHeartbeat",
        "api_key": 68,
        "api_version": 0,
        "client_software_name": name,
        "client_software_version": version,
        "requests": requests,
        "connections_now": 3.0,
        "connections_peak": 5.0,
        "first_seen": 1736121600000,
        "last_seen": 1736125200000,
        "gateways": ["gw-1"],
    }


def test_commands_carry_zookeeper_chroot_and_the_downgrade_flag() -> None:
    state = {"zookeeper": "zk-0:2181,zk-1:2181", "chroot": "/team-a/gw"}
    assert featurectl_command("downgrade", state, "transaction.version=1") == (
        f"{FEATURECTL} downgrade --zookeeper zk-0:2181,zk-1:2181 --chroot /team-a/gw "
        "--feature transaction.version=1 --allow-downgrade"
    )
    assert featurectl_command("finalize", STATE, "group.version=1") == (
        f"{FEATURECTL} finalize --zookeeper zk-0:2181 --feature group.version=1"
    )


def test_without_a_known_zookeeper_commands_show_a_placeholder() -> None:
    assert featurectl_command("describe", {"zookeeper": None, "chroot": None}) == (
        f"{FEATURECTL} describe --zookeeper ZK_HOST:2181"
    )


def test_safe_targets_come_first_and_blocked_ones_list_their_prerequisites() -> None:
    verdicts = [
        verdict("transaction.version", 2, 1, "upgrade", False, gateways=["gw-old"]),
        verdict("kraft.version", 1, 0, "upgrade", True),
        verdict("group.version", 1, 1, "noop", True),
    ]
    blockers = [
        {
            "feature": "transaction.version",
            "level": 2,
            "gateway_id": "gw-old",
            "min_level": 0,
            "max_level": 1,
        }
    ]
    steps = build_steps(verdicts, blockers, [], STATE)
    assert [(s["step"], s["feature"], s["kind"], s["safe_now"]) for s in steps] == [
        (1, "kraft.version", "command", True),
        (2, "transaction.version", "manual", False),
        (3, "transaction.version", "check", False),
        (4, "transaction.version", "command", False),
    ]
    assert "gw-old (supports 0-1)" in steps[1]["action"]
    assert steps[2]["command"] == (
        f"{FEATURECTL} describe --zookeeper zk-0:2181 --feature transaction.version"
    )
    assert steps[3]["command"] == (
        f"{FEATURECTL} finalize --zookeeper zk-0:2181 --feature transaction.version=2"
    )


def test_a_blocked_disable_names_the_clients_then_rechecks_then_disables() -> None:
    users = [{"client_software_name": "librdkafka", "client_software_version": "2.6.1"}]
    verdicts = [verdict("group.version", 0, 1, "disable", False, clients=users)]
    clients = [
        client("group.version", 1, "librdkafka", "2.6.1", 40.0),
        client("group.version", 1, "apache-kafka-java", "3.6.0", 0.0),  # not in use
    ]
    steps = build_steps(verdicts, [], clients, STATE)
    assert [s["kind"] for s in steps] == ["manual", "check", "command"]
    assert "librdkafka 2.6.1 (ConsumerGroupHeartbeat v0, 3 connections now" in steps[0]["action"]
    assert "3.6.0" not in steps[0]["action"]
    assert "--target group.version=0" in steps[1]["command"]
    assert steps[2]["command"] == (
        f"{FEATURECTL} disable --zookeeper zk-0:2181 --feature group.version --allow-downgrade"
    )


def test_an_upgrade_nobody_vouches_for_asks_for_a_live_gateway() -> None:
    steps = build_steps([verdict("group.version", 1, 0, "upgrade", False)], [], [], STATE)
    assert [s["kind"] for s in steps] == ["manual", "command"]
    assert "no live gateway" in steps[0]["action"]


def test_the_recheck_collects_from_the_same_gateways_and_plans_with_the_same_catalogue() -> None:
    state = {"zookeeper": "zk-0:2181", "chroot": "/team-a/gw", "catalogue": "conf/features.toml"}
    command = collect_again_command(state, "group.version=1")
    assert command == (
        f"{FEATURECTL} collect --zookeeper zk-0:2181 --chroot /team-a/gw --out metrics-recheck "
        f"--rounds 20 && {FEATURECTL} plan --metrics metrics-recheck --zookeeper zk-0:2181 "
        "--chroot /team-a/gw --catalogue conf/features.toml --target group.version=1"
    )
    # Pasted into a new shell in the repository root: found, and featurectl's parsers
    # accept every argument.
    assert [command_problem(words) for words in simple_commands(command)] == [None, None]


def test_a_level_the_brokers_finalized_above_the_gateways_is_said_in_the_features_section() -> None:
    def row(feature: str, held: int, brokers: int | None, cluster_max: int) -> dict[str, Any]:
        return {
            "feature": feature, "finalized_level": held, "cluster_max_level": cluster_max,
            "catalogue_max_level": 2, "live_gateways": 2, "broker_finalized_level": brokers,
        }  # fmt: skip

    doc = {
        "features": [
            row("group.version", 0, 1, 1),  # withheld, and the gateways can serve it
            row("share.version", 1, 3, 2),  # the gateways can serve 2 of the brokers' 3
            row("transaction.version", 2, 2, 2),  # as the brokers hold it: nothing to say
            row("streams.version", 0, None, 1),  # no gateway's broker reports features
        ]
    }
    assert withheld_notes(doc) == [
        "group.version: brokers finalized 1, gateways hold 0; clients get 0 "
        "(featurectl finalize --feature group.version=1 to serve 1)",
        "share.version: brokers finalized 3, gateways hold 1; clients get 1 "
        "(featurectl finalize --feature share.version=2 to serve 2)",
    ]
    header, rows = feature_table(doc)
    assert header[-1] == "brokers finalized"
    assert [r[-1] for r in rows] == [1, 3, 2, "-"]
