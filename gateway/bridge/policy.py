"""Who the bridge serves: ``[bridge] policy``, a list of rules, the first that matches
decides; none matching, ``bridge_old_clients`` does.

A rule is ``MATCH... -> ACTION``, e.g.::

    "client_id=^legacy-billing -> refuse"
    "software=librdkafka version=<1.0 -> refuse"
    "principal=User:batch -> bridge"
    "client_id=^legacy- -> cap Fetch=2,Produce=1"
    "principal=User:reports -> cap 0.10"
    "* -> bridge"

Matches (all must hold): ``software`` (KIP-511 name, exact), ``version`` (its version:
comparisons joined by commas, ``>=0.9,<2``), ``client_id`` (a regular expression,
searched), ``principal`` (exact, "User:..."): the client's verified TLS certificate, or
its SASL login (PLAIN, SCRAM, OAUTHBEARER, read as the broker's exchange goes by,
``gateway.server.logins``). A rule with ``principal=`` does not match before the login
(a connection's first ApiVersions comes before it) nor a login the gateway cannot read
(GSSAPI): it falls through to the next rule. Old clients send no KIP-511 software
(ApiVersions v3 came with Kafka 2.4), so their connections read "unknown" and are told
apart by client id or principal.

Actions:

``bridge``
    requests at versions the upstream removed are converted (the default).
``refuse``
    they are answered as Kafka 4 answers them.
``cap LIMITS``
    bridged, and every ApiVersions answer the client gets (at any ApiVersions version,
    a modern client's too) tells it no version above the cap, so it speaks no higher.
    LIMITS is either Kafka's API names with a version each, ``Fetch=2,Produce=1`` (an
    API left unnamed is not capped), or an Apache Kafka release, ``0.10`` or ``2.0.1``:
    what that release's broker advertised, each API at its max then, and an API it did
    not have left out. An API whose lowest version lies above its cap is left out of
    the answer (the client cannot be served within the cap). The cap is what the client
    is told, not a filter: a client that sends a higher version anyway (one that never
    asks ApiVersions) is served as any other. Capped answers are counted in
    ``kafka_gateway_bridge_capped_answers_total`` and logged (``bridge.versions_capped``)
    once per client identity.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..protocol import api_key_of, api_name
from ..versions import VersionRange, release_tracks

BRIDGE = "bridge"
REFUSE = "refuse"
CAP = "cap"
ACTIONS = (BRIDGE, REFUSE, CAP)

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
    # ``cap``: API key → the highest version told; ``cap_release``: a release's table
    # (its APIs only), else the APIs unnamed are not capped.
    cap: tuple[tuple[int, int], ...] = ()
    cap_release: str | None = None

    def capped(self, ranges: dict[int, VersionRange]) -> dict[int, VersionRange]:
        """``ranges`` as this rule's cap lets the client be told them (a new dict)."""
        limits = dict(self.cap)
        out: dict[int, VersionRange] = {}
        for key, (low, high) in ranges.items():
            limit = limits.get(key)
            if limit is None:
                if self.cap_release is None:
                    out[key] = (low, high)
                continue
            if limit >= low:
                out[key] = (low, min(high, limit))
        return out

    def describe_cap(self) -> str:
        """The cap as the rule wrote it (for logs)."""
        if self.cap_release is not None:
            return self.cap_release
        return ",".join(f"{api_name(key)}={limit}" for key, limit in self.cap)

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
    action, _, limits = action.strip().partition(" ")
    if not arrow or action not in ACTIONS:
        raise ValueError(f"expected 'MATCH... -> bridge|refuse|cap LIMITS', got {text!r}")
    if (action == CAP) != bool(limits.strip()):
        raise ValueError(
            f"{text!r}: 'cap' takes limits (cap Fetch=2,Produce=1 or cap 0.10), "
            "'bridge' and 'refuse' take none"
        )
    cap, cap_release = _parse_cap(limits.strip()) if action == CAP else ((), None)
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
    return Rule(
        action,
        fields.get("software"),
        tuple(versions),
        client_id,
        fields.get("principal"),
        cap,
        cap_release,
    )


def _release_cap(text: str) -> tuple[tuple[int, int], ...] | None:
    """What Apache Kafka release ``text`` ("0.10", "0.10.2.1", "2.0.1") advertised, API
    key → max version; None when it names no release of the tables."""
    parts = text.split(".")
    if not all(p.isdigit() for p in parts):
        return None
    # Before 1.0 a release is named by three numbers (0.10.2), from 1.0 by two (2.0).
    size = 3 if parts[0] == "0" else 2
    name = ".".join((parts + ["0"] * size)[:size])
    for track in ("zookeeper", "kraft"):  # 3.x and older: their ZooKeeper-mode brokers
        for release in release_tracks()[track]:
            if release.name == name:
                return tuple(sorted((k, high) for k, (_low, high) in release.versions.items()))
    return None


def _parse_cap(limits: str) -> tuple[tuple[tuple[int, int], ...], str | None]:
    """``cap``'s limits: (API key → max version, the release named or None)."""
    if "=" not in limits:
        table = _release_cap(limits)
        if table is None:
            known = ", ".join(r.name for r in release_tracks()["zookeeper"][:4])
            raise ValueError(
                f"cap {limits!r}: expected an Apache Kafka release ({known}, ... 4.4) "
                "or API=VERSION pairs (cap Fetch=2,Produce=1)"
            )
        return table, limits
    out: dict[int, int] = {}
    for part in limits.split(","):
        name, eq, number = part.strip().partition("=")
        key = api_key_of(name)
        if not eq or key is None:
            raise ValueError(
                f"cap {part.strip()!r}: expected API=VERSION with Kafka's API name "
                "(Fetch=2, Produce=1, ListOffsets=0)"
            )
        if not number.isdigit() or int(number) > 0x7FFF:
            raise ValueError(f"cap {part.strip()!r}: the version is a number from 0 to 32767")
        if key in out:
            raise ValueError(f"cap {limits!r}: {name} is capped twice")
        out[key] = int(number)
    return tuple(sorted(out.items())), None


def decide(
    rules: Sequence[Rule],
    enabled: bool,
    software: tuple[str, str],
    client_id: str | None,
    principal: str | None,
) -> str:
    """BRIDGE or REFUSE for a client (a capped client is bridged)."""
    return verdict(matching(rules, software, client_id, principal), enabled)


def verdict(rule: Rule | None, enabled: bool) -> str:
    """BRIDGE or REFUSE for a client whose first matching rule is ``rule`` (None: no rule
    matched, ``enabled`` decides)."""
    if rule is None:
        return BRIDGE if enabled else REFUSE
    return REFUSE if rule.action == REFUSE else BRIDGE


def matching(
    rules: Sequence[Rule],
    software: tuple[str, str],
    client_id: str | None,
    principal: str | None,
) -> Rule | None:
    """The first rule that matches a client, if any."""
    for rule in rules:
        if rule.matches(software[0], software[1], client_id, principal):
            return rule
    return None


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
