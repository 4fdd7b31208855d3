"""DeleteAcls v0. Going up, each filter takes ``PatternTypeFilter`` LITERAL (3), as Kafka
3.9's ``DeleteAclsRequest`` read v0; coming down, each filter's matching ACLs are the
LITERAL ones only, as for DescribeAcls v0 (``describe_acls``)."""

from __future__ import annotations

from typing import Any

from ..conversion import Conversion
from ..messages import Message
from .describe_acls import LITERAL


def literal_only(values: Message, version: int, state: Any) -> int:
    if version == 0:
        for result in values["FilterResults"] or ():
            result["MatchingAcls"] = [
                acl
                for acl in result["MatchingAcls"] or ()
                if acl.get("PatternType", LITERAL) == LITERAL
            ]
    return 0


CONVERSION = Conversion("DeleteAcls", down=literal_only)
