"""The admin v0s Kafka 4.0 removed: up to v1 as the v0 request meant, down as Kafka
answered v0, checked against Kafka's own message specs."""

from __future__ import annotations

import random

import pytest

from gateway.bridge import plan
from gateway.bridge.apis.describe_acls import LITERAL
from gateway.bridge.apis.describe_configs import DEFAULT_CONFIG
from gateway.bridge.convert import request_up, response_down
from gateway.bridge.messages import decode, encode, schema
from gateway.protocol import api_key_of, api_name
from gateway.versions import release_tracks
from tests.unit.gateway.bridge.test_messages import _random

KAFKA_44 = dict(release_tracks()["kraft"][-1].versions)
PREFIXED = 4
# Kafka's ConfigSource codes: 1 dynamic topic, 2 dynamic broker, 3 dynamic default
# broker, 4 static broker, 5 default, 6 dynamic broker logger.
SOURCES = range(-1, 7)


def keys(*names: str) -> list[int]:
    found = [api_key_of(name) for name in names]
    assert None not in found
    return found  # type: ignore[return-value]


# The admin APIs whose v0 Kafka 4.0 removed (AlterConfigs v0 it kept).
TOKENS_AND_LOG_DIRS = keys(
    "AlterReplicaLogDirs",
    "DescribeLogDirs",
    "CreateDelegationToken",
    "RenewDelegationToken",
    "ExpireDelegationToken",
    "DescribeDelegationToken",
)
ADMIN_APIS = (
    keys("DescribeAcls", "CreateAcls", "DeleteAcls", "DescribeConfigs") + TOKENS_AND_LOG_DIRS
)
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, DESCRIBE_CONFIGS = ADMIN_APIS[:4]


@pytest.mark.parametrize("key", ADMIN_APIS, ids=api_name)
def test_kafka_4_4_gets_each_admin_v0_as_v1(key: int) -> None:
    assert plan.removed()[key] == (0, 0)
    assert plan.plans(KAFKA_44)[key] == plan.Bridged(0, 1)
    assert plan.widen(KAFKA_44, KAFKA_44)[key] == (0, KAFKA_44[key][1])


def test_alter_configs_v0_is_not_bridged_kafka_4_kept_it() -> None:
    assert KAFKA_44[33][0] == 0 and 33 not in plan.plans(KAFKA_44)


@pytest.mark.parametrize("key", TOKENS_AND_LOG_DIRS, ids=api_name)
def test_log_dir_and_token_v1s_are_v0_again_both_ways(key: int) -> None:
    name = api_name(key)
    rng = random.Random(name)
    for _ in range(5):
        request = encode(f"{name}Request", 0, _random(rng, schema(f"{name}Request", 0)))
        up = request_up(key, 0, 1, request)
        assert up.awaited and up.body == request  # the same layout: the same bytes
        answer = encode(f"{name}Response", 1, _random(rng, schema(f"{name}Response", 1)))
        assert response_down(key, 1, 0, answer).body == answer


def _filter(**extra: object) -> dict[str, object]:
    return {
        "ResourceTypeFilter": 2,
        "ResourceNameFilter": "orders",
        "PrincipalFilter": "User:alice",
        "HostFilter": "*",
        "Operation": 3,
        "PermissionType": 3,
        **extra,
    }


def test_describe_acls_v0_asks_for_literal_patterns() -> None:
    up = request_up(DESCRIBE_ACLS, 0, 1, encode("DescribeAclsRequest", 0, _filter()))
    assert decode("DescribeAclsRequest", 1, up.body) == _filter(PatternTypeFilter=LITERAL)


def _acl_resource(name: str, pattern: int) -> dict[str, object]:
    acl = {"Principal": "User:alice", "Host": "*", "Operation": 3, "PermissionType": 3}
    return {"ResourceType": 2, "ResourceName": name, "PatternType": pattern, "Acls": [acl]}


def test_describe_acls_v0_answers_leave_out_what_v0_cannot_say() -> None:
    answer = {
        "ThrottleTimeMs": 7,
        "ErrorCode": 0,
        "ErrorMessage": None,
        "Resources": [_acl_resource("orders", LITERAL), _acl_resource("ord", PREFIXED)],
    }
    down = response_down(DESCRIBE_ACLS, 1, 0, encode("DescribeAclsResponse", 1, answer))
    got = decode("DescribeAclsResponse", 0, down.body)
    assert got["ThrottleTimeMs"] == 7
    assert [r["ResourceName"] for r in got["Resources"]] == ["orders"]
    assert got["Resources"][0]["Acls"] == answer["Resources"][0]["Acls"]  # type: ignore[index]


def test_describe_acls_error_crosses_intact() -> None:
    # SECURITY_DISABLED (54): a broker without an authorizer.
    answer = {
        "ThrottleTimeMs": 0,
        "ErrorCode": 54,
        "ErrorMessage": "No Authorizer",
        "Resources": [],
    }
    down = response_down(DESCRIBE_ACLS, 1, 0, encode("DescribeAclsResponse", 1, answer))
    assert decode("DescribeAclsResponse", 0, down.body) == answer


def test_create_acls_v0_creates_literal_patterns() -> None:
    creation = {
        "ResourceType": 2,
        "ResourceName": "orders",
        "Principal": "User:alice",
        "Host": "*",
        "Operation": 3,
        "PermissionType": 3,
    }
    body = encode("CreateAclsRequest", 0, {"Creations": [creation]})
    up = request_up(CREATE_ACLS, 0, 1, body)
    (sent,) = decode("CreateAclsRequest", 1, up.body)["Creations"]
    assert sent == {**creation, "ResourcePatternType": LITERAL}


def test_delete_acls_v0_deletes_literal_patterns_and_reports_only_those() -> None:
    body = encode("DeleteAclsRequest", 0, {"Filters": [_filter(), _filter(HostFilter=None)]})
    up = request_up(DELETE_ACLS, 0, 1, body)
    filters = decode("DeleteAclsRequest", 1, up.body)["Filters"]
    assert [f["PatternTypeFilter"] for f in filters] == [LITERAL, LITERAL]
    assert filters[1]["HostFilter"] is None

    def matching(name: str, pattern: int) -> dict[str, object]:
        return {
            "ErrorCode": 0,
            "ErrorMessage": None,
            "ResourceType": 2,
            "ResourceName": name,
            "PatternType": pattern,
            "Principal": "User:alice",
            "Host": "*",
            "Operation": 3,
            "PermissionType": 3,
        }

    answer = {
        "ThrottleTimeMs": 0,
        "FilterResults": [
            {
                "ErrorCode": 0,
                "ErrorMessage": None,
                "MatchingAcls": [matching("a", LITERAL), matching("b", PREFIXED)],
            },
            {"ErrorCode": 0, "ErrorMessage": None, "MatchingAcls": []},
        ],
    }
    down = response_down(DELETE_ACLS, 1, 0, encode("DeleteAclsResponse", 1, answer))
    results = decode("DeleteAclsResponse", 0, down.body)["FilterResults"]
    assert [[m["ResourceName"] for m in r["MatchingAcls"]] for r in results] == [["a"], []]
    assert "PatternType" not in results[0]["MatchingAcls"][0]


def test_describe_configs_v0_goes_up_without_synonyms() -> None:
    request = {
        "Resources": [
            {"ResourceType": 2, "ResourceName": "orders", "ConfigurationKeys": None},
            {"ResourceType": 4, "ResourceName": "1", "ConfigurationKeys": ["log.retention.ms"]},
        ]
    }
    up = request_up(DESCRIBE_CONFIGS, 0, 1, encode("DescribeConfigsRequest", 0, request))
    assert decode("DescribeConfigsRequest", 1, up.body) == {**request, "IncludeSynonyms": False}


def test_describe_configs_v0_is_default_is_the_default_config_source() -> None:
    configs = [
        {
            "Name": f"c{source}",
            "Value": None if source == 2 else f"v{source}",
            "ReadOnly": source == 4,
            "ConfigSource": source,
            "IsSensitive": source == 2,
            "Synonyms": [{"Name": f"c{source}", "Value": "x", "Source": source}],
        }
        for source in SOURCES
    ]
    answer = {
        "ThrottleTimeMs": 3,
        "Results": [
            {
                "ErrorCode": 0,
                "ErrorMessage": None,
                "ResourceType": 2,
                "ResourceName": "orders",
                "Configs": configs,
            }
        ],
    }
    down = response_down(DESCRIBE_CONFIGS, 1, 0, encode("DescribeConfigsResponse", 1, answer))
    (result,) = decode("DescribeConfigsResponse", 0, down.body)["Results"]
    assert [(c["Name"], c["IsDefault"]) for c in result["Configs"]] == [
        (f"c{s}", s == DEFAULT_CONFIG) for s in SOURCES
    ]
    for got, sent in zip(result["Configs"], configs, strict=True):
        assert (got["Value"], got["ReadOnly"], got["IsSensitive"]) == (
            sent["Value"],
            sent["ReadOnly"],
            sent["IsSensitive"],
        )
