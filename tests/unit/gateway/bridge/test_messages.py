"""The spec-driven codec: every version of every message round-trips, and the versions
Kafka 4.0 removed convert up to the first version 4.x accepts and back down."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from gateway.bridge import messages
from gateway.bridge.messages import Field, Struct, convert, decode, encode, schema

ALL_VERSIONS = [
    (name, version)
    for name, entries in messages._specs().items()
    for entry in entries
    for version in range(entry["versions"][0], entry["versions"][1] + 1)
]

_INTS = {"int8": 7, "int16": 15, "uint16": 16, "int32": 31, "uint32": 32, "int64": 63}


def fetch_v4_answer(high_watermark: int, records: bytes) -> dict[str, Any]:
    """A Fetch v4 response body: partition 0 of topic ``t``, all of it stable."""
    return {
        "ThrottleTimeMs": 0,
        "Responses": [
            {
                "Topic": "t",
                "Partitions": [
                    {
                        "PartitionIndex": 0,
                        "ErrorCode": 0,
                        "HighWatermark": high_watermark,
                        "LastStableOffset": high_watermark,
                        "AbortedTransactions": None,
                        "Records": records,
                    }
                ],
            }
        ],
    }


def _value(rng: random.Random, f: Field, kind: str, depth: int) -> Any:
    if kind == "struct":
        assert f.children is not None
        return _random(rng, f.children, depth + 1)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "float64":
        return rng.random() * 1e6
    if kind in _INTS:
        bits = _INTS[kind]
        low = 0 if kind.startswith("u") else -(2 ** (bits - 1 if bits % 2 else bits))
        high = 2**bits - 1 if kind.startswith("u") else 2 ** (bits if bits % 2 else bits - 1) - 1
        return rng.randint(max(low, -(2**63)), min(high, 2**63 - 1))
    if kind == "uuid":
        return rng.randbytes(16)
    if kind == "string":
        return rng.choice(["", "topic-ä", "x" * rng.randint(1, 40)])
    return rng.randbytes(rng.randint(0, 30))


def _field(rng: random.Random, f: Field, depth: int) -> Any:
    if f.nullable and rng.random() < 0.2:
        return None
    if f.array:
        count = rng.randint(0, 3 if depth < 3 else 0)
        return [_value(rng, f, f.kind, depth) for _ in range(count)]
    return _value(rng, f, f.kind, depth)


def _random(rng: random.Random, s: Struct, depth: int = 0) -> dict[str, Any]:
    out = {f.name: _field(rng, f, depth) for f in s.fields}
    out.update({f.name: _field(rng, f, depth) for f in s.tagged.values()})
    return out


def test_every_message_version_is_read() -> None:
    assert len(ALL_VERSIONS) > 700
    assert {"ProduceRequest", "FetchResponse", "RequestHeader"} <= set(messages._specs())


@pytest.mark.parametrize(("name", "version"), ALL_VERSIONS)
def test_round_trip(name: str, version: int) -> None:
    rng = random.Random(f"{name}{version}")
    s = schema(name, version)
    for _ in range(3):
        values = _random(rng, s)
        body = encode(name, version, values)
        assert decode(name, version, body) == values
        assert encode(name, version, decode(name, version, body)) == body


def test_defaults_fill_what_the_source_lacks() -> None:
    # Fetch v2 has no MaxBytes nor IsolationLevel: v4 gets the spec's defaults.
    v2 = {
        "ReplicaId": -1,
        "MaxWaitMs": 500,
        "MinBytes": 1,
        "Topics": [
            {
                "Topic": "t",
                "Partitions": [{"Partition": 0, "FetchOffset": 5, "PartitionMaxBytes": 9}],
            }
        ],
    }
    up = decode("FetchRequest", 4, convert("FetchRequest", 2, 4, encode("FetchRequest", 2, v2)))
    assert up["MaxBytes"] == 0x7FFFFFFF and up["IsolationLevel"] == 0
    assert up["Topics"] == v2["Topics"]


def test_removed_versions_convert_up_and_down() -> None:
    # ListOffsets v0 → v1 drops MaxNumOffsets; the v1 answer down to v0 keeps the
    # partition's identity and error (its offsets are the bridge's to map).
    v0 = {
        "ReplicaId": -1,
        "Topics": [
            {
                "Name": "t",
                "Partitions": [{"PartitionIndex": 0, "Timestamp": -2, "MaxNumOffsets": 1}],
            }
        ],
    }
    up = decode(
        "ListOffsetsRequest",
        1,
        convert("ListOffsetsRequest", 0, 1, encode("ListOffsetsRequest", 0, v0)),
    )
    assert up["Topics"][0]["Partitions"] == [{"PartitionIndex": 0, "Timestamp": -2}]
    # OffsetCommit v1 → v2: the per-partition timestamp goes, RetentionTimeMs is -1.
    v1 = {
        "GroupId": "g",
        "GenerationIdOrMemberEpoch": 3,
        "MemberId": "m",
        "Topics": [
            {
                "Name": "t",
                "Partitions": [
                    {
                        "PartitionIndex": 0,
                        "CommittedOffset": 10,
                        "CommitTimestamp": 123,
                        "CommittedMetadata": "",
                    }
                ],
            }
        ],
    }
    up = decode(
        "OffsetCommitRequest",
        2,
        convert("OffsetCommitRequest", 1, 2, encode("OffsetCommitRequest", 1, v1)),
    )
    assert up["RetentionTimeMs"] == -1
    assert "CommitTimestamp" not in up["Topics"][0]["Partitions"][0]
    # Produce v3 answer → v2, v1 and v0 (v0 lacks the throttle time, v1 the log append time).
    v3 = {
        "Responses": [
            {
                "Name": "t",
                "PartitionResponses": [
                    {"Index": 0, "ErrorCode": 0, "BaseOffset": 41, "LogAppendTimeMs": 77}
                ],
            }
        ],
        "ThrottleTimeMs": 5,
    }
    body = encode("ProduceResponse", 3, v3)
    for version, size in ((2, len(body)), (1, len(body) - 8), (0, len(body) - 12)):
        down = convert("ProduceResponse", 3, version, body)
        assert len(down) == size
        assert (
            decode("ProduceResponse", version, down)["Responses"][0]["PartitionResponses"][0][
                "BaseOffset"
            ]
            == 41
        )
    # A Fetch v4 answer down to v0: no throttle time, no LastStableOffset.
    v4 = fetch_v4_answer(9, b"\x01\x02")
    down = convert("FetchResponse", 4, 0, encode("FetchResponse", 4, v4))
    assert down == encode("FetchResponse", 0, v4) and len(down) == 4 + 3 + 4 + 4 + 2 + 8 + 4 + 2


def test_unknown_tags_round_trip_but_do_not_convert() -> None:
    body = encode("FetchRequest", 12, {"Topics": []})
    tagged = body[:-1] + b"\x01\x63\x02hi"  # tag 99, two bytes
    assert decode("FetchRequest", 12, tagged)[messages.UNKNOWN_TAGS] == {99: b"hi"}
    assert encode("FetchRequest", 12, decode("FetchRequest", 12, tagged)) == tagged
    assert convert("FetchRequest", 12, 12, tagged) == body


def test_truncated_bodies_are_malformed() -> None:
    body = encode("ProduceRequest", 2, {"Acks": 1, "TimeoutMs": 5, "TopicData": [{"Name": "t"}]})
    for cut in range(len(body)):
        with pytest.raises(messages.Malformed):
            decode("ProduceRequest", 2, body[:cut])
    assert struct.unpack(">hi", body[:6]) == (1, 5)
