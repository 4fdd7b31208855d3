"""Kafka's ssl.principal.mapping.rules, with the cases of Kafka's SslPrincipalMapperTest."""

from __future__ import annotations

import pytest

from gateway.principal import (
    PrincipalRuleError,
    distinguished_name,
    map_subject,
    parse_rules,
    principal_of,
)

KAFKA_EXAMPLE = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
    "DEFAULT"
)


@pytest.mark.parametrize(
    ("dn", "name"),
    [
        ("CN=kafka-server,OU=ServiceUsers,O=Org,C=US", "kafka-server"),
        ("CN=duke,OU=JavaSoft,O=Sun Microsystems,L=Palo Alto,ST=CA,C=US", "duke@javasoft"),
        ("cn=Test User,dc=example", "TEST"),
        ("OU=JavaSoft,O=Sun Microsystems", "OU=JavaSoft,O=Sun Microsystems"),  # DEFAULT
    ],
)
def test_rules_apply_in_order_as_kafkas_do(dn: str, name: str) -> None:
    assert map_subject(parse_rules(KAFKA_EXAMPLE), dn) == name


def test_no_applying_rule_gives_no_principal() -> None:
    assert map_subject(parse_rules("RULE:^CN=(.*)$/$1/"), "OU=x") is None


def test_escaped_slash_and_literal_dollar_in_a_rule() -> None:
    rules = parse_rules(r"RULE:^CN=(.*)\/x$/\$$1/")
    assert map_subject(rules, "CN=a/x") == "$a"


@pytest.mark.parametrize(
    "bad", ["RULE:^CN=(.*)$/$1", "RULE:^CN=(.*)$/$1/X", "DEFAULT,garbage", "RULE:(/x/"]
)
def test_malformed_rules_are_refused(bad: str) -> None:
    with pytest.raises(PrincipalRuleError):
        parse_rules(bad)


def test_certificate_subject_is_written_as_rfc_2253_most_specific_first() -> None:
    cert = {
        "subject": (
            (("countryName", "US"),),
            (("organizationName", "Example, Inc."),),
            (("commonName", "ops"),),
        )
    }
    assert distinguished_name(cert) == r"CN=ops,O=Example\, Inc.,C=US"
    assert principal_of(parse_rules("DEFAULT"), cert) == r"User:CN=ops,O=Example\, Inc.,C=US"
    assert principal_of(parse_rules("DEFAULT"), None) is None
