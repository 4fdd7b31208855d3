"""A bridged request up and its answer down, per API, as the bridge sends them."""

from __future__ import annotations

import random
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from gateway.bridge.convert import request_up, response_down
from gateway.bridge.messages import decode, encode, schema
from gateway.protocol import api_name
from tests.unit.gateway.bridge.test_messages import _random, fetch_v4_answer


def _message_set(magic: int, values: list[bytes]) -> bytes:
    builder = MemoryRecordsBuilder(magic, 0, 1 << 20)
    for value in values:
        builder.append(timestamp=1234, key=b"k", value=value)
    builder.close()
    return bytes(builder.buffer())


def test_produce_v2_goes_up_as_v3_with_a_record_batch() -> None:
    body = encode(
        "ProduceRequest",
        2,
        {
            "Acks": -1,
            "TimeoutMs": 3000,
            "TopicData": [
                {
                    "Name": "t",
                    "PartitionData": [{"Index": 0, "Records": _message_set(1, [b"a", b"b"])}],
                }
            ],
        },
    )
    up = request_up(0, 2, 3, body)
    assert up.awaited
    sent = decode("ProduceRequest", 3, up.body)
    assert sent["TransactionalId"] is None and sent["Acks"] == -1
    records = sent["TopicData"][0]["PartitionData"][0]["Records"]
    (batch,) = list(MemoryRecords(records))
    assert batch.magic == 2 and [(r.key, r.value, r.timestamp) for r in batch] == [
        (b"k", b"a", 1234),
        (b"k", b"b", 1234),
    ]
    answer = encode(
        "ProduceResponse",
        3,
        {
            "Responses": [
                {
                    "Name": "t",
                    "PartitionResponses": [
                        {"Index": 0, "ErrorCode": 0, "BaseOffset": 7, "LogAppendTimeMs": -1}
                    ],
                }
            ],
            "ThrottleTimeMs": 0,
        },
    )
    down = decode("ProduceResponse", 2, up.down(answer).body)
    assert down["Responses"][0]["PartitionResponses"][0]["BaseOffset"] == 7


def test_produce_with_acks_0_is_not_awaited() -> None:
    body = encode("ProduceRequest", 1, {"Acks": 0, "TimeoutMs": 1, "TopicData": []})
    assert not request_up(0, 1, 3, body).awaited


def test_fetch_v2_answer_comes_down_as_magic_1_from_the_offset_asked() -> None:
    body = encode(
        "FetchRequest",
        2,
        {
            "ReplicaId": -1,
            "MaxWaitMs": 100,
            "MinBytes": 1,
            "Topics": [
                {
                    "Topic": "t",
                    "Partitions": [
                        {"Partition": 0, "FetchOffset": 11, "PartitionMaxBytes": 1 << 20}
                    ],
                }
            ],
        },
    )
    up = request_up(1, 2, 4, body)
    sent = decode("FetchRequest", 4, up.body)
    assert sent["MaxBytes"] == 0x7FFFFFFF and sent["IsolationLevel"] == 0
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i in range(3):
        builder.append(i, 99, b"k", b"v%d" % i, [("h", b"1")])
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, 10)
    answer = encode("FetchResponse", 4, fetch_v4_answer(13, bytes(batch)))
    down = up.down(answer)
    assert down.headers_dropped == 2  # offsets 11 and 12
    records = decode("FetchResponse", 2, down.body)["Responses"][0]["Partitions"][0]["Records"]
    got = [(b.magic, r.offset, r.value) for b in MemoryRecords(records) for r in b]
    assert got == [(1, 11, b"v1"), (1, 12, b"v2")]
    # A v0/v1 client reads magic 0.
    v1 = request_up(1, 1, 4, encode("FetchRequest", 1, decode("FetchRequest", 2, body)))
    records = decode("FetchResponse", 1, v1.down(answer).body)["Responses"][0]["Partitions"][0][
        "Records"
    ]
    assert {b.magic for b in MemoryRecords(records)} == {0}


def test_list_offsets_v0_answer_lists_the_offset() -> None:
    answer = encode(
        "ListOffsetsResponse",
        1,
        {
            "Topics": [
                {
                    "Name": "t",
                    "Partitions": [
                        {"PartitionIndex": 0, "ErrorCode": 0, "Timestamp": -1, "Offset": 42},
                        {"PartitionIndex": 1, "ErrorCode": 3, "Timestamp": -1, "Offset": -1},
                    ],
                }
            ]
        },
    )
    down = decode("ListOffsetsResponse", 0, response_down(2, 1, 0, answer).body)
    partitions = down["Topics"][0]["Partitions"]
    assert [p["OldStyleOffsets"] for p in partitions] == [[42], []]


def _bridged_versions() -> list[tuple[int, int, int]]:
    from gateway.bridge.plan import plans
    from gateway.versions import release_tracks

    upstream = dict(release_tracks()["kraft"][-1].versions)
    return [
        (key, version, bridged.target)
        for key, bridged in plans(upstream).items()
        for version in range(bridged.oldest, bridged.target)
    ]


@pytest.mark.parametrize(("key", "version", "target"), _bridged_versions())
def test_every_bridged_version_converts_or_refuses_with_a_value_error(
    key: int, version: int, target: int
) -> None:
    """Random requests of every removed version (junk records included) go up or raise
    ValueError (the bridge then closes the connection, as Kafka does); answers of the
    target version come back down the same way."""
    name = api_name(key)
    rng = random.Random(f"{key}/{version}")
    for _ in range(20):
        values = _random(rng, schema(f"{name}Request", version))
        body = encode(f"{name}Request", version, values)
        if rng.random() < 0.3:
            body = body[: rng.randrange(len(body) + 1)]
        try:
            up = request_up(key, version, target, body)
        except (ValueError, struct.error):
            continue
        answer = _random(rng, schema(f"{name}Response", target))
        try:
            down = up.down(encode(f"{name}Response", target, answer))
        except (ValueError, struct.error):
            continue
        decode(f"{name}Response", version, down.body)
