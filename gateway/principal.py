"""The principal of a connection, from its TLS client certificate, as Kafka derives it.

Kafka's ``ssl.principal.mapping.rules``: a list of ``RULE:pattern/replacement/[LU]``
and ``DEFAULT``, tried in order on the certificate subject written as RFC 2253 (the
form Java's ``X500Principal.getName()`` gives, most specific RDN first); the first
rule whose pattern matches the *whole* subject gives the name, ``DEFAULT`` gives the
subject itself, and the principal is ``User:`` + that name. No rule applying means no
principal (Kafka fails the authentication). Pure functions, no I/O.

A SASL login the broker accepted replaces this principal (``gateway.server.logins``,
from ``gateway.protocol._sasl_login``): Kafka too names a SASL_SSL connection by its
SASL login, not its certificate.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

PRINCIPAL_TYPE = "User"
ANONYMOUS = "User:ANONYMOUS"  # what Kafka calls a connection without a principal


class PrincipalRuleError(ValueError):
    """ssl.principal.mapping.rules that Kafka would refuse."""


# Kafka's own grammar (SslPrincipalMapper.RULE_PATTERN): '/' and '\' may be escaped.
_RULE = re.compile(
    r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,\s*|$)"
)


@dataclass(frozen=True, slots=True)
class Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L" lower, "U" upper, "" as is

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self.replacement, dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _python_replacement(java: str) -> str:
    """Java's replaceAll syntax ($1, \\$) as Python's re.sub template (\\g<1>)."""
    out: list[str] = []
    i = 0
    while i < len(java):
        ch = java[i]
        if ch == "\\" and i + 1 < len(java):
            out.append(java[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        if ch == "$":
            match = re.match(r"\$(\d+)", java[i:])
            if match:
                out.append(f"\\g<{match.group(1)}>")
                i += len(match.group(0))
                continue
        out.append("\\\\" if ch == "\\" else ch)
        i += 1
    return "".join(out)


def parse_rules(text: str) -> tuple[Rule, ...]:
    """Parse ssl.principal.mapping.rules; raise PrincipalRuleError naming the bad part."""
    rules: list[Rule] = []
    pos = 0
    text = text.strip()
    if not text:
        return (Rule(None),)
    while pos < len(text):
        match = _RULE.match(text, pos)
        if match is None or match.end() == pos:
            raise PrincipalRuleError(
                f"invalid rule at {text[pos:]!r}: expected DEFAULT or RULE:pattern/replacement/[LU]"
            )
        if match.group(1):
            rules.append(Rule(None))
        else:
            pattern = match.group(2).replace("\\/", "/")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise PrincipalRuleError(f"invalid pattern {pattern!r}: {exc}") from None
            replacement = _python_replacement(match.group(3).replace("\\/", "/"))
            rules.append(Rule(compiled, replacement, match.group(4)))
        pos = match.end()
    return tuple(rules)


# One parse per rules text, not one per connection.
cached_rules = functools.lru_cache(maxsize=8)(parse_rules)


def map_subject(rules: tuple[Rule, ...], dn: str) -> str | None:
    """The name the first applying rule gives ``dn``, or None when none applies."""
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    return None


# RFC 2253 attribute names Java prints by name; others by their OID, as Java does.
_RFC2253_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
    "emailAddress": "1.2.840.113549.1.9.1",
    "serialNumber": "2.5.4.5",
}


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(cert: dict[str, Any]) -> str | None:
    """A certificate's subject (``ssl.getpeercert()`` form) as RFC 2253, as Kafka sees it."""
    subject = cert.get("subject")
    if not subject:
        return None
    # getpeercert lists RDNs in certificate order; RFC 2253 writes the last one first.
    return ",".join(
        "+".join(f"{_RFC2253_NAMES.get(name, name)}={_escape(value)}" for name, value in rdn)
        for rdn in reversed(subject)
    )


def principal_of(rules: tuple[Rule, ...], cert: dict[str, Any] | None) -> str | None:
    """``User:<name>`` for a verified client certificate, None without one or when no
    rule applies to its subject."""
    dn = distinguished_name(cert) if cert else None
    if dn is None:
        return None
    name = map_subject(rules, dn)
    return None if name is None else f"{PRINCIPAL_TYPE}:{name}"
