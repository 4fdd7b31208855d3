"""The advertising rules of releases.py, on handmade specs and ApiKeys dumps."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.kafka_protocol.apikeys import KeysDump, parse
from scripts.kafka_protocol.releases import RELEASES, minor, pinned, tracks


def request(
    key: int, valid: str, listeners: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"apiKey": key, "type": "request", "name": f"K{key}Request",
                            "validVersions": valid, **extra}  # fmt: skip
    if listeners is not None:
        spec["listeners"] = listeners
    return spec


def specs(*requests: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in requests}


def dump_for(requests: dict[str, dict[str, Any]], **extra: Any) -> KeysDump:
    """A dump that agrees with ``requests`` (ApiKeys is generated from the specs)."""
    dump = KeysDump(**extra)
    for spec in requests.values():
        low, _, high = spec["validVersions"].partition("-")
        dump.keys[spec["apiKey"]] = (spec["name"], int(low), int(high or low))
    return dump


def test_minor_and_pinned() -> None:
    assert minor("3.9.2") == "3.9"
    assert minor("0.10.2.2") == "0.10.2"
    assert pinned("4.4.0") == list(RELEASES)
    read = pinned("4.3.0")
    assert read[-2:] == ["4.2.2", "4.3.0"] and "4.3.1" not in read


def test_before_2_2_the_default_answer_is_the_row() -> None:
    dump = KeysDump(keys={0: ("PRODUCE", 0, 2), 1: ("FETCH", 0, 3)}, default_answer={0: (0, 2)})
    assert tracks(["0.10.2.2"], {"0.10.2.2": {}}, {"0.10.2.2": dump}) == {
        "zookeeper": [("0.10.2.2", {0: (0, 2)})],
        "kraft": [],
    }
    # 0.10.0 and 0.10.1 have no default answer: every ApiKeys constant.
    bare = KeysDump(keys={0: ("PRODUCE", 0, 2), 7: ("CONTROLLED_SHUTDOWN_KEY", 1, 1)})
    rows = tracks(["0.10.0.1"], {"0.10.0.1": {}}, {"0.10.0.1": bare})
    assert rows["zookeeper"] == [("0.10.0.1", {0: (0, 2), 7: (1, 1)})]


def test_without_listeners_a_zookeeper_broker_serves_all_but_disabled_keys() -> None:
    s = specs(request(0, "0-7"), request(52, "0"))
    dump = dump_for(s, flags={52: {"isEnabled": False}, 0: {"isEnabled": True}})
    rows = tracks(["2.7.2"], {"2.7.2": s}, {"2.7.2": dump})
    assert rows == {"zookeeper": [("2.7.2", {0: (0, 7)})], "kraft": []}


def test_listeners_unstable_telemetry_and_produce_min() -> None:
    s = specs(
        request(0, "3-13", ["broker"]),
        request(3, "0-13", ["zkBroker", "broker"]),
        request(22, "0-6", ["zkBroker", "broker"], latestVersionUnstable=True),
        request(52, "0-2", ["controller"]),
        request(71, "0", ["broker"]),
        request(76, "0", ["broker"], latestVersionUnstable=True),  # nothing stable yet
    )
    dump = dump_for(
        s,
        consts={"PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION": 0},
        sets={"brokerApis": frozenset({0, 3, 22, 71, 76})},
    )
    rows = tracks(["4.4.0"], {"4.4.0": s}, {"4.4.0": dump})
    assert rows == {"zookeeper": [], "kraft": [("4.4.0", {0: (0, 13), 3: (0, 13), 22: (0, 5)})]}


def test_both_tracks_before_4_0() -> None:
    s = specs(request(3, "0-12", ["zkBroker", "broker"]), request(4, "0-7", ["zkBroker"]))
    dump = dump_for(s, sets={"zkBrokerApis": frozenset({3, 4})})
    rows = tracks(["3.9.2"], {"3.9.2": s}, {"3.9.2": dump})
    assert rows["zookeeper"] == [("3.9.2", {3: (0, 12), 4: (0, 7)})]
    assert rows["kraft"] == [("3.9.2", {3: (0, 12)})]


def test_a_rule_apikeys_contradicts_fails_the_generation() -> None:
    s = specs(request(3, "0-12", ["zkBroker"]), request(4, "0-7", ["zkBroker"]))
    dump = dump_for(s, sets={"zkBrokerApis": frozenset({3})})
    with pytest.raises(ValueError, match=r"only ours \[4\]"):
        tracks(["3.9.2"], {"3.9.2": s}, {"3.9.2": dump})


def test_a_spec_apikeys_disagrees_with_fails_the_generation() -> None:
    s = specs(request(3, "0-12", ["zkBroker"]))
    dump = dump_for(s)
    dump.keys[3] = ("METADATA", 0, 11)
    with pytest.raises(ValueError, match="not in ApiKeys"):
        tracks(["3.9.2"], {"3.9.2": s}, {"3.9.2": dump})


def test_parse_the_dump() -> None:
    dump = parse(
        "key\t0\tPRODUCE\t3\t13\n"
        "flag\t0\tforwardable\tfalse\n"
        "set\tbrokerApis\t0,1\n"
        "set\tempty\t\n"
        "const\tPRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION\t0\n"
        "default\t0\t0\t13\n"
    )
    assert dump.keys == {0: ("PRODUCE", 3, 13)}
    assert dump.flags == {0: {"forwardable": False}}
    assert dump.sets == {"brokerApis": frozenset({0, 1}), "empty": frozenset()}
    assert dump.consts == {"PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION": 0}
    assert dump.default_answer == {0: (0, 13)}
