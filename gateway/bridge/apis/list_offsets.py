"""ListOffsets v0: the answer's single offset becomes v0's list of offsets (empty for a
partition in error or without one)."""

from __future__ import annotations

from typing import Any

from ..conversion import Conversion
from ..messages import Message


def old_style_offsets(values: Message, version: int, state: Any) -> int:
    if version == 0:
        for topic in values["Topics"]:
            for partition in topic["Partitions"]:
                offset = partition.get("Offset", -1)
                ok = partition["ErrorCode"] == 0 and offset >= 0
                partition["OldStyleOffsets"] = [offset] if ok else []
    return 0


CONVERSION = Conversion("ListOffsets", down=old_style_offsets)
