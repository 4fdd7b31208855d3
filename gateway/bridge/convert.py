"""A bridged request up to the upstream's version and its answer back down: the one place
the bridge changes bytes. Sans-I/O.

Every bridged API converts field by field (``messages.convert``: the spec's defaults
for what the older version lacks, what the newer one lacks left out). Three need more:

* **Produce v0-2**: each partition's message set (magic 0/1) becomes a record batch v2
  (``records.to_record_batch``); acks=0 gets no answer, upstream or here.
* **Fetch v0-3**: each partition's record batches become a message set of the magic the
  client reads (magic 0 for v0/v1, 1 for v2/v3: KIP-32), from the offset it asked for,
  within the partition bytes it asked for (``records.to_message_set``).
* **ListOffsets v0**: the answer's single offset becomes v0's list of offsets.
* **The admin v0s** (ACLs, configs): ``admin.response_down``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..protocol import FETCH, PRODUCE, api_name
from . import admin, messages, records
from .messages import Message
from .plan import LIST_OFFSETS

# Fetch v2 is the first whose answers may hold magic 1 messages (KIP-32).
FIRST_MAGIC1_FETCH = 2


@dataclass(slots=True)
class Answer:
    body: bytes
    headers_dropped: int = 0


@dataclass(slots=True)
class Upward:
    """A request converted up: its body at the target version, whether it is answered
    (Produce acks=0 is not), and how to bring the answer down."""

    body: bytes
    awaited: bool
    down: Callable[[bytes | memoryview], Answer]


def request_up(api_key: int, version: int, target: int, body: bytes | memoryview) -> Upward:
    """``body`` (a request of ``api_key`` at ``version``) at ``target``, and its answer's
    way back. Raises ``messages.Malformed`` or ``records.RecordsError`` on a request it
    cannot read."""
    name = api_name(api_key)
    values = messages.decode(f"{name}Request", version, body, strict=False, keep_unknown=False)
    awaited = True
    fetched: dict[tuple[str, int], tuple[int, int]] = {}
    if api_key == PRODUCE:
        awaited = values["Acks"] != 0
        for topic in values["TopicData"]:
            for partition in topic["PartitionData"]:
                partition["Records"] = records.to_record_batch(partition["Records"])
    elif api_key == FETCH:
        for topic in values["Topics"]:
            for partition in topic["Partitions"]:
                where = (topic["Topic"], partition["Partition"])
                fetched[where] = (partition["FetchOffset"], partition["PartitionMaxBytes"])
    up = messages.encode(f"{name}Request", target, values)

    def down(answer: bytes | memoryview) -> Answer:
        return response_down(api_key, target, version, answer, fetched)

    return Upward(up, awaited, down)


def response_down(
    api_key: int,
    source: int,
    version: int,
    body: bytes | memoryview,
    fetched: dict[tuple[str, int], tuple[int, int]] | None = None,
) -> Answer:
    """An answer at ``source`` as the client's ``version`` expects it; ``fetched``: a
    Fetch's (topic, partition) → (fetch offset, partition max bytes)."""
    name = f"{api_name(api_key)}Response"
    values = messages.decode(name, source, body, strict=False, keep_unknown=False)
    dropped = 0
    if api_key == FETCH:
        dropped = _fetch_down(values, version, fetched or {})
    elif api_key == LIST_OFFSETS and version == 0:
        for topic in values["Topics"]:
            for partition in topic["Partitions"]:
                offset = partition.get("Offset", -1)
                ok = partition["ErrorCode"] == 0 and offset >= 0
                partition["OldStyleOffsets"] = [offset] if ok else []
    elif api_key in admin.ADMIN_APIS:
        admin.response_down(api_key, version, values)
    return Answer(messages.encode(name, version, values), dropped)


def _fetch_down(
    values: Message, version: int, fetched: dict[tuple[str, int], tuple[int, int]]
) -> int:
    magic = 1 if version >= FIRST_MAGIC1_FETCH else 0
    dropped = 0
    for topic in values["Responses"]:
        for partition in topic["Partitions"]:
            offset, max_bytes = fetched.get((topic["Topic"], partition["PartitionIndex"]), (0, 0))
            converted = records.to_message_set(partition["Records"], magic, offset, max_bytes)
            partition["Records"] = converted.data
            dropped += converted.headers_dropped
    return dropped
