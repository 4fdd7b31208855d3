"""Fetch v0-3: each partition's record batches come down as a message set of the magic the
client reads (magic 0 for v0/v1, 1 for v2/v3: KIP-32), from the offset it asked for,
within the partition bytes it asked for (``records.to_message_set``). Record headers,
which no message set holds, are dropped and counted."""

from __future__ import annotations

from .. import records
from ..conversion import Conversion
from ..messages import Message

# Fetch v2 is the first whose answers may hold magic 1 messages (KIP-32).
FIRST_MAGIC1_FETCH = 2

# (topic, partition) → (fetch offset, partition max bytes), as the client asked.
Fetched = dict[tuple[str, int], tuple[int, int]]


def asked(values: Message) -> Fetched:
    return {
        (topic["Topic"], partition["Partition"]): (
            partition["FetchOffset"],
            partition["PartitionMaxBytes"],
        )
        for topic in values["Topics"]
        for partition in topic["Partitions"]
    }


def message_sets(values: Message, version: int, fetched: Fetched | None) -> int:
    magic = 1 if version >= FIRST_MAGIC1_FETCH else 0
    fetched = fetched or {}
    dropped = 0
    for topic in values["Responses"]:
        for partition in topic["Partitions"]:
            offset, max_bytes = fetched.get((topic["Topic"], partition["PartitionIndex"]), (0, 0))
            converted = records.to_message_set(partition["Records"], magic, offset, max_bytes)
            partition["Records"] = converted.data
            dropped += converted.headers_dropped
    return dropped


CONVERSION = Conversion("Fetch", up=asked, down=message_sets)
