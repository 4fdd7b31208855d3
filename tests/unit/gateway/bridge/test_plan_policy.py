"""What the bridge carries for an upstream, what it tells a client, and whom it serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.bridge import plan, policy
from gateway.bridge.plan import Bridged
from gateway.versions import release_tracks, removed_kip896

# What Kafka 4.4 (KRaft) and 3.9 advertise, from the release tables.
KAFKA_44 = dict(release_tracks()["kraft"][-1].versions)
KAFKA_39 = dict(next(r for r in release_tracks()["zookeeper"] if r.name == "3.9").versions)


def test_the_removed_versions_are_read_from_the_specs() -> None:
    assert plan.removed() == {
        0: (0, 2),
        1: (0, 3),
        2: (0, 0),
        8: (0, 1),
        9: (0, 0),
        19: (0, 1),
        20: (0, 0),
        23: (0, 1),
        # The admin v0s: ACLs, DescribeConfigs, log dirs, delegation tokens.
        **{key: (0, 0) for key in (29, 30, 31, 32, 34, 35, 38, 39, 40, 41)},
    }


def test_kafka_4_4_gets_each_removed_version_converted_to_its_lowest() -> None:
    assert removed_kip896(KAFKA_44)
    plans = plan.plans(KAFKA_44)
    assert plans[0] == Bridged(0, 3)  # advertised 0-13, but v0-2 close the connection
    assert plans[1] == Bridged(0, 4)
    assert plans[2] == Bridged(0, 1)
    assert plans[8] == Bridged(0, 2)
    assert plans[9] == Bridged(0, 1)


def test_kafka_3_9_is_left_alone() -> None:
    assert not removed_kip896(KAFKA_39)
    assert plan.plans(KAFKA_39) == {}
    assert plan.widen(KAFKA_39, KAFKA_39) is KAFKA_39


def test_widen_tells_a_bridged_client_the_removed_versions() -> None:
    told = plan.widen(KAFKA_44, KAFKA_44)
    assert told[1] == (0, KAFKA_44[1][1]) and told[2] == (0, KAFKA_44[2][1])
    assert told[0] == KAFKA_44[0]  # Produce: advertised from v0 by Kafka 4.4 already
    assert told[3] == KAFKA_44[3]  # Metadata: Kafka 4 kept every version
    assert KAFKA_44[1][0] == 4  # the shared table is not changed


def test_every_version_the_bridge_carries_is_held_back_from_kafka_4s_pass_through() -> None:
    from gateway.versions import refused_below

    # Below what 4.4 advertises, or (Produce) held back by refused_below: never forwarded.
    held = refused_below(KAFKA_44)
    for key, bridged in plan.plans(KAFKA_44).items():
        assert max(KAFKA_44[key][0], held.get(key, 0)) == bridged.target, key


@pytest.mark.parametrize(
    ("text", "who", "action"),
    [
        ("* -> refuse", (("unknown", "unknown"), "x", None), "refuse"),
        ("client_id=^legacy- -> refuse", (("unknown", "unknown"), "legacy-app", None), "refuse"),
        ("client_id=^legacy- -> refuse", (("unknown", "unknown"), "app", None), "bridge"),
        (
            "software=librdkafka version=<1.0 -> refuse",
            (("librdkafka", "0.11.6"), None, None),
            "refuse",
        ),
        (
            "software=librdkafka version=<1.0 -> refuse",
            (("librdkafka", "2.3.0"), None, None),
            "bridge",
        ),
        (
            "software=librdkafka version=>=0.9,<1 -> refuse",
            (("librdkafka", "0.9.5"), None, None),
            "refuse",
        ),
        ("principal=User:batch -> refuse", (("unknown", "unknown"), None, "User:batch"), "refuse"),
        ("principal=User:batch -> refuse", (("unknown", "unknown"), None, "User:other"), "bridge"),
    ],
)
def test_the_first_rule_that_matches_decides(
    text: str, who: tuple[tuple[str, str], str | None, str | None], action: str
) -> None:
    rules = policy.parse_rules([text])
    assert policy.decide(rules, True, *who) == action


def test_without_a_match_the_switch_decides() -> None:
    rules = policy.parse_rules(["client_id=x -> bridge"])
    assert policy.decide(rules, False, ("a", "1"), "x", None) == "bridge"
    assert policy.decide(rules, False, ("a", "1"), "y", None) == "refuse"
    assert policy.decide((), True, ("a", "1"), None, None) == "bridge"


@pytest.mark.parametrize(
    "text",
    [
        "client_id=x",
        "client_id=x -> maybe",
        "colour=red -> bridge",
        "client_id=( -> refuse",
        "version=abc -> bridge",
    ],
)
def test_bad_rules_say_why(text: str) -> None:
    with pytest.raises(ValueError):
        policy.parse_rule(text)


# -- cap ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("* -> cap", "'cap' takes limits"),
        ("* -> bridge Fetch=2", "'bridge' and 'refuse' take none"),
        ("* -> cap Fetsh=2", "expected API=VERSION with Kafka's API name"),
        ("* -> cap Fetch=two", "the version is a number from 0 to 32767"),
        ("* -> cap Fetch=-1", "the version is a number from 0 to 32767"),
        ("* -> cap Fetch=40000", "the version is a number from 0 to 32767"),
        ("* -> cap Fetch=2,Fetch=3", "Fetch is capped twice"),
        ("* -> cap 0.8", "expected an Apache Kafka release"),
        ("* -> cap 9.1", "expected an Apache Kafka release"),
        ("* -> cap 0.10,Fetch=3", "expected API=VERSION"),
    ],
)
def test_bad_caps_say_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        policy.parse_rule(text)


def test_a_cap_by_api_clips_those_it_names_and_leaves_the_rest() -> None:
    rule = policy.parse_rule("client_id=^legacy -> cap Fetch=2, Produce=1,ListOffsets=0")
    assert rule.action == policy.CAP and rule.describe_cap() == "Produce=1,Fetch=2,ListOffsets=0"
    told = rule.capped(plan.widen(KAFKA_44, KAFKA_44))
    assert (told[0], told[1], told[2]) == ((0, 1), (0, 2), (0, 0))
    assert told[3] == KAFKA_44[3]  # Metadata: not named, not capped
    # Unwidened (a client the bridge does not widen for), Fetch starts at 4: above the
    # cap, so the client is told no Fetch at all.
    assert 1 not in rule.capped(KAFKA_44)


@pytest.mark.parametrize(
    ("name", "row"), [("0.10", "0.10.0"), ("0.10.2.1", "0.10.2"), ("2.0.1", "2.0")]
)
def test_a_cap_by_release_is_that_brokers_table(name: str, row: str) -> None:
    release = next(r for r in release_tracks()["zookeeper"] if r.name == row)
    rule = policy.parse_rule(f"* -> cap {name}")
    widened = plan.widen(KAFKA_44, KAFKA_44)
    told = rule.capped(widened)
    # What it lacked is left out, and what 4.4 no longer serves at that release's
    # versions (WriteTxnMarkers v0, for 2.0).
    kept = {
        k for k in set(release.versions) & set(KAFKA_44) if release.versions[k][1] >= widened[k][0]
    }
    assert set(told) == kept and {0, 1, 2, 3, 18} <= kept
    for key, (low, high) in told.items():
        assert high == min(release.versions[key][1], KAFKA_44[key][1]), key
        assert low == widened[key][0], key


def test_a_capped_client_is_bridged() -> None:
    rules = policy.parse_rules(["client_id=^legacy -> cap 0.10"])
    assert policy.decide(rules, False, ("unknown", "unknown"), "legacy-1", None) == "bridge"
    assert policy.matching(rules, ("unknown", "unknown"), "app", None) is None


def test_a_bad_cap_in_the_config_or_the_policy_file_names_itself(tmp_path: Path) -> None:
    from gateway.config import ConfigError, load_config

    config = tmp_path / "gateway.toml"
    config.write_text('[bridge]\npolicy = ["* -> cap Fetch=2,Fetsh=1"]\n')
    with pytest.raises(ConfigError, match="Fetsh=1"):
        load_config(str(config))
    rules = tmp_path / "rules.txt"
    rules.write_text("# legacy\nclient_id=^a -> cap 0.10\nclient_id=^b -> cap 0.3\n")
    with pytest.raises(ValueError, match=r"rules.txt:3: cap '0.3'"):
        policy.read_rules_file(str(rules))
