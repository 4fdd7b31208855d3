"""Merging several releases' specs into one table, on handmade specs."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.kafka_protocol.merge import api_table, merge, messages_table


def message(kind: str, valid: str, fields: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"apiKey": 7, "type": kind, "name": f"Thing{kind.title()}", "validVersions": valid,
            "flexibleVersions": extra.pop("flexible", "2+"), "fields": fields, **extra}  # fmt: skip


def f(name: str, versions: str = "0+", kind: str = "int32") -> dict[str, Any]:
    return {"name": name, "type": kind, "versions": versions, "about": "docs"}


# Release "1.0": versions 0-2. Release "2.0" drops v0 (as Kafka 4.0 dropped old versions)
# and adds v3 (a new field); its spec also renamed a field, which changes no layout.
OLD = {
    "ThingRequest": message("request", "0-2", [f("A"), f("B", "1+")], listeners=["zkBroker"]),
    "ThingResponse": message("response", "0-2", [f("E")]),
}
NEW = {
    "ThingRequest": message(
        "request", "1-3", [f("A"), f("Bee", "1+"), f("C", "3+")], listeners=["broker"]
    ),
    "ThingResponse": message("response", "1-3", [f("E")]),
}
RELEASES = [("1.0", OLD), ("2.0", NEW)]


def test_each_version_comes_from_the_newest_release_that_has_it() -> None:
    merged = merge(RELEASES)
    assert [(e.low, e.high, e.release) for e in merged["ThingRequest"]] == [
        (0, 0, "1.0"),
        (1, 3, "2.0"),
    ]
    assert merged["ThingRequest"][1].spec is NEW["ThingRequest"]


def test_api_table_is_the_union() -> None:
    table = api_table(merge(RELEASES), RELEASES)
    assert table == {
        "7": {
            "name": "Thing",
            "versions": [0, 3],
            "flexible_from": 2,
            "listeners": ["broker", "zkBroker"],
            "same_layout": {
                # v2 (flexible) differs from v1; v1 (from 2.0, a renamed field) still
                # differs from v0 (from 1.0) by its field B.
                "request": {},
                "response": {"1": 0, "3": 2},
            },
        }
    }


def test_layouts_compare_across_releases() -> None:
    # 2.0's v1 reads like 1.0's v1 although the field was renamed.
    new = {**NEW, "ThingRequest": message("request", "1-3", [f("A"), f("Bee", "1+")])}
    table = api_table(merge([("1.0", OLD), ("2.0", new)]), [("1.0", OLD), ("2.0", new)])
    assert table["7"]["same_layout"]["request"] == {"3": 2}


def test_a_gap_in_the_versions_is_an_error() -> None:
    gap = {
        "ThingRequest": message("request", "3-4", [f("A")]),
        "ThingResponse": message("response", "3-4", [f("E")]),
    }
    old = {
        "ThingRequest": message("request", "0-1", [f("A")]),
        "ThingResponse": message("response", "0-1", [f("E")]),
    }
    with pytest.raises(ValueError, match="not contiguous"):
        merge([("1.0", old), ("2.0", gap)])


def test_flexibility_that_turns_back_is_an_error() -> None:
    old = {
        "ThingRequest": message("request", "0-2", [f("A")], flexible="1+"),
        "ThingResponse": message("response", "0-2", [f("E")], flexible="1+"),
    }
    new = {
        "ThingRequest": message("request", "2-3", [f("A")], flexible="3+"),
        "ThingResponse": message("response", "2-3", [f("E")], flexible="3+"),
    }
    releases = [("1.0", old), ("2.0", new)]
    with pytest.raises(ValueError, match="not a suffix"):
        api_table(merge(releases), releases)


def test_messages_table_trims_the_specs() -> None:
    table = messages_table(merge(RELEASES))
    entries = table["ThingRequest"]
    assert [(e["versions"], e["release"]) for e in entries] == [([0, 0], "1.0"), ([1, 3], "2.0")]
    assert all("about" not in fld for e in entries for fld in e["spec"]["fields"])


def test_a_renamed_message_is_one_message_under_its_newest_name() -> None:
    # Kafka 2.4 renamed ElectPreferredLeaders (key 43, v0) to ElectLeaders (v0-2).
    def renamed(name: str, kind: str, valid: str) -> dict[str, Any]:
        return {**message(kind, valid, [f("A")]), "name": name, "apiKey": 43}

    old = {
        "ElectPreferredLeadersRequest": renamed("ElectPreferredLeadersRequest", "request", "0"),
        "ElectPreferredLeadersResponse": renamed("ElectPreferredLeadersResponse", "response", "0"),
    }
    new = {
        "ElectLeadersRequest": renamed("ElectLeadersRequest", "request", "0-2"),
        "ElectLeadersResponse": renamed("ElectLeadersResponse", "response", "0-2"),
    }
    releases = [("2.3", old), ("2.4", new)]
    merged = merge(releases)
    assert sorted(merged) == ["ElectLeadersRequest", "ElectLeadersResponse"]
    assert [(e.low, e.high, e.release) for e in merged["ElectLeadersRequest"]] == [(0, 2, "2.4")]
    table = api_table(merged, releases)
    assert table["43"]["name"] == "ElectLeaders"
    assert table["43"]["versions"] == [0, 2]
