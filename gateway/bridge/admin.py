"""The admin APIs' v0s Kafka 4.0 removed (KIP-896), brought down as Kafka answered them.

Going up, each converts field by field (``messages.convert``) and the spec's defaults say
what v0 meant: the ACL filters and creations take ``PatternType`` LITERAL (3), which is
what a v0 request always meant (Kafka 3.9's ``DescribeAclsRequest``/``DeleteAclsRequest``
turned v0's ANY into LITERAL and refused anything else; ``CreateAclsRequest`` v0 had
LITERAL only), and DescribeConfigs v1 takes ``IncludeSynonyms`` false. The log-dir and
delegation-token v1s are v0 again ("Version 1 is the same as version 0"): nothing more.

Coming down, three answers change meaning between versions and need a rule each:

* **DescribeAcls v0**: v0 has no pattern type; a resource whose pattern type is not
  LITERAL is left out (Kafka 3.9's ``DescribeAclsResponse`` refused to write one at v0,
  and its broker, filtering by LITERAL, never had one to write).
* **DeleteAcls v0**: likewise each filter's matching ACLs, LITERAL ones only.
* **DescribeConfigs v0**: ``IsDefault`` is "the value is Kafka's default", which v1
  says as ``ConfigSource`` DEFAULT_CONFIG (5): Kafka's ``DescribeConfigsResponse``
  wrote v0's ``isDefault`` as ``source == DEFAULT_CONFIG`` (2.x), and reads it back as
  that source. (3.9's broker, on generated messages, no longer set it at all and
  answered every v0 config as not default: the bridge keeps the meaning, not that
  regression.) v1's synonyms are not asked for and v0 has none.
"""

from __future__ import annotations

from .messages import Message

DESCRIBE_CONFIGS = 32
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
ALTER_REPLICA_LOG_DIRS = 34
DESCRIBE_LOG_DIRS = 35
CREATE_DELEGATION_TOKEN = 38
RENEW_DELEGATION_TOKEN = 39
EXPIRE_DELEGATION_TOKEN = 40
DESCRIBE_DELEGATION_TOKEN = 41

# The admin APIs whose v0 Kafka 4.0 removed (AlterConfigs v0 it kept).
ADMIN_APIS: tuple[int, ...] = (
    DESCRIBE_ACLS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_CONFIGS,
    ALTER_REPLICA_LOG_DIRS,
    DESCRIBE_LOG_DIRS,
    CREATE_DELEGATION_TOKEN,
    RENEW_DELEGATION_TOKEN,
    EXPIRE_DELEGATION_TOKEN,
    DESCRIBE_DELEGATION_TOKEN,
)

# Kafka's PatternType.LITERAL and ConfigSource.DEFAULT_CONFIG codes.
LITERAL = 3
DEFAULT_CONFIG = 5


def response_down(api_key: int, version: int, values: Message) -> None:
    """``values`` (an answer decoded at the upstream's version) made to mean at the
    client's ``version`` what Kafka's answer at that version meant; in place."""
    if version != 0:
        return
    if api_key == DESCRIBE_ACLS:
        values["Resources"] = [
            r for r in values["Resources"] or () if r.get("PatternType", LITERAL) == LITERAL
        ]
    elif api_key == DELETE_ACLS:
        for result in values["FilterResults"] or ():
            result["MatchingAcls"] = [
                acl
                for acl in result["MatchingAcls"] or ()
                if acl.get("PatternType", LITERAL) == LITERAL
            ]
    elif api_key == DESCRIBE_CONFIGS:
        for result in values["Results"] or ():
            for config in result["Configs"] or ():
                config["IsDefault"] = config.get("ConfigSource") == DEFAULT_CONFIG
