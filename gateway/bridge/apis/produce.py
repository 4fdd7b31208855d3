"""Produce v0-2: each partition's message set (magic 0 or 1) becomes a record batch v2
(``records.to_record_batch``) on its way up. acks=0 gets no answer, upstream or here."""

from __future__ import annotations

from .. import records
from ..conversion import Conversion
from ..messages import Message


def batches(values: Message) -> None:
    for topic in values["TopicData"]:
        for partition in topic["PartitionData"]:
            partition["Records"] = records.to_record_batch(partition["Records"])


def answered(values: Message) -> bool:
    return bool(values["Acks"] != 0)


CONVERSION = Conversion("Produce", up=batches, answered=answered)
