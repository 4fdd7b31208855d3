"""Who the bridge serves: ``[bridge] policy``, a list of rules, the first that matches
decides; none matching, ``[bridge] enabled`` does.

A rule is ``MATCH... -> ACTION``, e.g.::

    "client_id=^legacy-billing -> refuse"
    "software=librdkafka version=<1.0 -> refuse"
    "principal=User:batch -> bridge"
    "* -> bridge"

Matches (all must hold): ``software`` (KIP-511 name, exact), ``version`` (its version:
comparisons joined by commas, ``>=0.9,<2``), ``client_id`` (a regular expression,
searched), ``principal`` (exact, "User:...": known from a verified client certificate;
a SASL identity passes through the gateway unread). Old clients send no KIP-511 software
(ApiVersions v3 came with Kafka 2.4), so their connections read "unknown" and are told
apart by client id or principal. Actions: ``bridge``, ``refuse`` (requests at removed
versions are answered as Kafka 4 answers them).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

BRIDGE = "bridge"
REFUSE = "refuse"
ACTIONS = (BRIDGE, REFUSE)

_COMPARE: dict[str, Callable[[tuple[int, ...], tuple[int, ...]], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    ">": operator.gt,
    "<": operator.lt,
    "=": operator.eq,
}


def _numbers(text: str) -> tuple[int, ...]:
    """A version's leading numbers ("2.0.2-RC1" → (2, 0, 2)); () when it has none."""
    out: list[int] = []
    for part in text.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        out.append(int(digits.group()))
        if digits.end() != len(part):
            break
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Rule:
    action: str
    software: str | None = None
    versions: tuple[tuple[str, tuple[int, ...]], ...] = ()
    client_id: re.Pattern[str] | None = None
    principal: str | None = None

    def matches(
        self, software: str, version: str, client_id: str | None, principal: str | None
    ) -> bool:
        if self.software is not None and software != self.software:
            return False
        if self.versions:
            have = _numbers(version)
            if not have or not all(_COMPARE[op](have, want) for op, want in self.versions):
                return False
        if self.client_id is not None and not self.client_id.search(client_id or ""):
            return False
        return self.principal is None or principal == self.principal


def parse_rule(text: str) -> Rule:
    """One rule (see the module docstring); ValueError says what is wrong."""
    match, arrow, action = text.partition("->")
    action = action.strip()
    if not arrow or action not in ACTIONS:
        raise ValueError(f"expected 'MATCH... -> bridge|refuse', got {text!r}")
    fields: dict[str, str] = {}
    for item in match.split():
        if item == "*":
            continue
        key, eq, value = item.partition("=")
        if not eq or key not in ("software", "version", "client_id", "principal") or not value:
            raise ValueError(f"{item!r}: expected software=, version=, client_id= or principal=")
        fields[key] = value
    versions: list[tuple[str, tuple[int, ...]]] = []
    for part in filter(None, fields.get("version", "").split(",")):
        op = next((o for o in _COMPARE if part.startswith(o)), "==")
        wanted = _numbers(part[len(op) :] if part.startswith(op) else part)
        if not wanted:
            raise ValueError(f"version {part!r}: expected e.g. <2.1 or >=0.9")
        versions.append((op, wanted))
    try:
        client_id = re.compile(fields["client_id"]) if "client_id" in fields else None
    except re.error as exc:
        raise ValueError(f"client_id {fields['client_id']!r}: {exc}") from None
    return Rule(action, fields.get("software"), tuple(versions), client_id, fields.get("principal"))


def decide(
    rules: Sequence[Rule],
    enabled: bool,
    software: tuple[str, str],
    client_id: str | None,
    principal: str | None,
) -> str:
    """BRIDGE or REFUSE for a client."""
    for rule in rules:
        if rule.matches(software[0], software[1], client_id, principal):
            return rule.action
    return BRIDGE if enabled else REFUSE


def parse_rules(texts: Sequence[str]) -> tuple[Rule, ...]:
    return tuple(parse_rule(text) for text in texts)


def read_rules_file(path: str) -> tuple[Rule, ...]:
    """``[bridge] policy_file``: one rule a line, ``#`` comments and blank lines skipped.
    ValueError names the line that is wrong (or the file that cannot be read)."""
    try:
        with open(path, encoding="utf-8") as lines:
            texts = [(n, line.split("#", 1)[0].strip()) for n, line in enumerate(lines, 1)]
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    rules: list[Rule] = []
    for number, text in texts:
        if not text:
            continue
        try:
            rules.append(parse_rule(text))
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: {exc}") from None
    return tuple(rules)
