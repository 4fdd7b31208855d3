"""Reading specs (comments, version ranges) and comparing wire layouts, on handmade specs."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.kafka_protocol.layout import layout, same_layout
from scripts.kafka_protocol.specs import (
    NO_VERSIONS,
    UNBOUNDED,
    flexible_from,
    parse_spec,
    trim,
    version_range,
)


def spec(
    fields: list[dict[str, Any]], valid: str = "0-3", flexible: str = "none", **extra: Any
) -> dict[str, Any]:
    return {"name": "TestRequest", "type": "request", "apiKey": 1000, "validVersions": valid,
            "flexibleVersions": flexible, "fields": fields, **extra}  # fmt: skip


def field(name: str, kind: str = "int32", versions: str = "0+", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "versions": versions, **extra}


def same(s: dict[str, Any]) -> dict[int, int]:
    low, high = version_range(s["validVersions"])
    return same_layout({v: layout(s, v) for v in range(low, high + 1)})


# --- specs ----------------------------------------------------------------------------


def test_comments_go_but_strings_keep_their_slashes() -> None:
    text = """// licence
    {
      "name": "X", // trailing comment
      /* block */ "about": "see https://kafka.apache.org // not a comment",
      "validVersions": "0"
    }"""
    parsed = parse_spec(text)
    assert parsed["about"] == "see https://kafka.apache.org // not a comment"
    assert parsed["validVersions"] == "0"


def test_text_after_the_spec_is_ignored_as_kafka_does() -> None:
    # 2.8's DescribeProducersRequest.json ends in a stray "]}"; Jackson stops at the value.
    assert parse_spec('{"name": "X", "validVersions": "0"}\n  ]}\n]\n')["name"] == "X"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("3-13", (3, 13)), ("9+", (9, UNBOUNDED)), ("5", (5, 5)), ("none", NO_VERSIONS),
     (None, NO_VERSIONS)],
)  # fmt: skip
def test_version_ranges(text: str | None, expected: tuple[int, int]) -> None:
    assert version_range(text) == expected


def test_flexible_from() -> None:
    assert flexible_from(spec([], flexible="9+")) == 9
    assert flexible_from(spec([], flexible="none")) is None


def test_trim_keeps_what_a_codec_needs_and_drops_the_docs() -> None:
    s = spec(
        [field("A", about="docs", entityType="topicName", mapKey=True, ignorable=True,
               nullableVersions="1+", default="null")],
        commonStructs=[{"name": "S", "versions": "0+", "fields": [field("B", about="x")]}],
        about="top docs",
    )  # fmt: skip
    trimmed = trim(s)
    assert "about" not in trimmed
    assert trimmed["fields"] == [
        {"name": "A", "type": "int32", "versions": "0+", "nullableVersions": "1+",
         "default": "null", "ignorable": True}
    ]  # fmt: skip
    assert trimmed["commonStructs"][0]["fields"] == [field("B")]


# --- layout ---------------------------------------------------------------------------


def test_identical_versions_map_to_the_lowest() -> None:
    # v1 adds a field; v2 and v3 change nothing on the wire (v3 -> 1, not 3 -> 2).
    s = spec([field("A"), field("B", versions="1+")])
    assert same(s) == {2: 1, 3: 1}


def test_nullability_counts() -> None:
    s = spec([field("A", "string", nullableVersions="2+")])
    assert same(s) == {1: 0, 3: 2}


def test_flexibility_counts_even_with_the_same_fields() -> None:
    assert same(spec([field("A")], flexible="2+")) == {1: 0, 3: 2}


def test_field_names_do_not_count() -> None:
    a = spec([field("A")])
    b = spec([field("Renamed")])
    assert layout(a, 0) == layout(b, 0)


def test_tagged_fields_count_with_tag_and_default() -> None:
    s = spec(
        [field("A"), field("T", "int64", versions="3+", tag=0, taggedVersions="3+", default=-1)],
        valid="0-4",
        flexible="2+",
    )
    assert same(s) == {1: 0, 4: 3}
    other_tag = spec(
        [field("A"), field("T", "int64", versions="3+", tag=1, taggedVersions="3+", default=-1)],
        flexible="2+",
    )
    other_default = spec(
        [field("A"), field("T", "int64", versions="3+", tag=0, taggedVersions="3+", default=0)],
        flexible="2+",
    )
    assert layout(s, 3) != layout(other_tag, 3)
    assert layout(s, 3) != layout(other_default, 3)


def test_nested_and_common_structs_compare_by_content() -> None:
    inline = spec([field("Items", "[]Item", fields=[field("X"), field("Y", versions="2+")])])
    common = spec(
        [field("Items", "[]Item")],
        commonStructs=[{"name": "Item", "versions": "0+",
                        "fields": [field("X"), field("Y", versions="2+")]}],
    )  # fmt: skip
    assert same(inline) == same(common) == {1: 0, 3: 2}
    assert layout(inline, 2) == layout(common, 2)


def test_a_fields_own_flexible_versions_override_the_messages() -> None:
    # RequestHeader's ClientId stays a classic string in flexible versions.
    classic = spec([field("ClientId", "string", flexibleVersions="none")], flexible="1+")
    compact = spec([field("ClientId", "string")], flexible="1+")
    assert layout(classic, 1) != layout(compact, 1)


def test_array_and_element_types_count() -> None:
    assert layout(spec([field("A", "[]int32")]), 0) != layout(spec([field("A", "int32")]), 0)
    assert layout(spec([field("A", "[]int32")]), 0) != layout(spec([field("A", "[]int64")]), 0)


def test_unknown_struct_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown type"):
        layout(spec([field("A", "Missing")]), 0)
