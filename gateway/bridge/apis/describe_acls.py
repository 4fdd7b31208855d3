"""DescribeAcls v0. Going up, the filter takes ``PatternTypeFilter`` LITERAL (3), the spec's
default for v1: Kafka 3.9's ``DescribeAclsRequest`` turned v0's ANY into LITERAL and
refused anything else. Coming down, v0 has no pattern type: a resource whose pattern
type is not LITERAL is left out (3.9's ``DescribeAclsResponse`` refused to write one at
v0, and its broker, filtering by LITERAL, never had one to write)."""

from __future__ import annotations

from typing import Any

from ..conversion import Conversion
from ..messages import Message

# Kafka's PatternType.LITERAL.
LITERAL = 3


def literal_only(values: Message, version: int, state: Any) -> int:
    if version == 0:
        values["Resources"] = [
            r for r in values["Resources"] or () if r.get("PatternType", LITERAL) == LITERAL
        ]
    return 0


CONVERSION = Conversion("DescribeAcls", down=literal_only)
