"""Why a level is capped, said briefly, per gateway and grouped across a fleet (plain
Python, no Spark): the gateway's own catalogue (the feature range it supports) where the
plan's data shows that, else the API versions its upstream lacks that the level needs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gateway.features.catalogue import Catalogue, Gate

from .decide import Support
from .identities import Row, attributed

# What caps a gateway's level (a blocker row's ``cap``).
CATALOGUE, UPSTREAM = "catalogue", "upstream"


def gate_text(gate: Gate) -> str:
    text = str(gate)
    if ">=" in text:
        name, _, version = text.partition(">=")
        return f"{name} v{version}+"
    return f"{text} (every version)"


def missing_gates(catalogue: Catalogue, feature: str, have: int | None, want: int) -> list[str]:
    """The gates of ``feature``'s levels above ``have`` up to ``want``: what a gateway
    whose upstream supports only ``have`` lacks at least one of."""
    spec = catalogue.get(feature)
    if spec is None:
        return []
    start = 0 if have is None else have
    return [gate_text(g) for gates in spec.levels[start:want] for g in gates]


def lacks_text(gates: Sequence[str], shown: int = 4) -> str:
    """``gates`` as one short phrase: whole APIs named together, a few at most."""
    whole = [g.removesuffix(" (every version)") for g in gates if g.endswith("(every version)")]
    versioned = [g for g in gates if not g.endswith("(every version)")]
    parts = list(versioned)
    if whole:
        more = f" and {len(whole) - shown} more" if len(whole) > shown else ""
        parts.append(", ".join(whole[:shown]) + more + " (any version)")
    text = ", ".join(parts)
    return text if len(gates) == 1 else f"at least one of {text}"


def catalogue_cap(
    blocker: Row, registrations: Mapping[str, Row], support: Iterable[Support] = ()
) -> str | None:
    """How the plan's data shows that ``blocker``'s gateway is capped by its own catalogue
    (the feature range it supports), not by its upstream's API versions; None where it
    does not show that.

    * A gateway lists every feature of its catalogue (at level 0 where its upstream offers
      none of the levels): one that does not list the feature has none in its catalogue.
    * Another live gateway through the same upstream, or in front of the same broker
      software, supports the level (``support``: ``(gateway_id, feature, min, max)``):
      the upstream offers what the level needs.
    """
    feature, level, gateway_id = blocker["feature"], blocker["level"], blocker["gateway_id"]
    if blocker.get("max_level") is None:
        return f"the catalogue has no {feature}"
    mine = registrations.get(gateway_id) or {}
    upstream, software = mine.get("upstream"), mine.get("broker_software")
    if software and "unknown" in software:
        software = None  # not fingerprinted: says nothing about its API versions
    peers = sorted(
        {
            other
            for other, name, _, high in support
            if name == feature and other != gateway_id and high is not None and high >= level
        }
    )
    for other in peers:
        if upstream and (registrations.get(other) or {}).get("upstream") == upstream:
            return f"{other} supports {feature}={level} through the same upstream"
    for other in peers:
        if software and (registrations.get(other) or {}).get("broker_software") == software:
            return f"{other} supports {feature}={level} in front of the same {software}"
    return None


def cap_fields(
    blocker: Row,
    catalogue: Catalogue,
    registrations: Mapping[str, Row],
    refusals: Iterable[Row] = (),
    support: Iterable[Support] = (),
) -> dict[str, Any]:
    """A blocker row's ``reason`` (cap_reason), ``lacks`` (the level's gates above what
    the gateway supports) and ``cap`` (CATALOGUE or UPSTREAM: what caps it)."""
    support = list(support)
    own = catalogue_cap(blocker, registrations, support)
    gates = missing_gates(catalogue, blocker["feature"], blocker.get("max_level"), blocker["level"])
    return {
        "reason": cap_reason(blocker, catalogue, registrations, refusals, support),
        "lacks": lacks_text(gates),
        "cap": UPSTREAM if own is None else CATALOGUE,
    }


def cap_reason(
    blocker: Row,
    catalogue: Catalogue,
    registrations: Mapping[str, Row],
    refusals: Iterable[Row] = (),
    support: Iterable[Support] = (),
) -> str:
    """Why ``blocker``'s gateway cannot serve the target level, naming the API versions:
    its own catalogue where the data shows it (catalogue_cap), else its upstream."""
    feature, level = blocker["feature"], blocker["level"]
    have = blocker.get("max_level")
    gates = missing_gates(catalogue, feature, have, level)
    reg = registrations.get(blocker["gateway_id"]) or {}
    upstream = reg.get("upstream")
    software = reg.get("broker_software")
    behind = "its upstream"
    if upstream or software:
        behind += " (" + ", ".join(x for x in (software, upstream and f"at {upstream}") if x) + ")"
    if have is None:
        supports = "does not list the feature, so supports level 0 only"
    else:
        supports = f"supports {blocker.get('min_level')}-{have}"
    if not gates:
        return f"{supports}: its catalogue has no level {level} of {feature}"
    lacks = lacks_text(gates)
    own = catalogue_cap(blocker, registrations, support)
    if own is not None:
        return (
            f"{supports}: its own catalogue caps it, not its upstream ({own}); "
            f"{feature}={level} needs {lacks}"
        )
    seen = sorted(
        {
            f"{r['api']} v{r['api_version']}"
            for r in refusals
            if attributed(r)
            and blocker["gateway_id"] in (r.get("gateways") or ())
            and r.get("reason") == "unsupported_version"
        }
    )
    evidence = f"; clients were refused {', '.join(seen)} there" if seen else ""
    return f"{supports}: {behind} does not offer {lacks}, which {feature}={level} needs{evidence}"


def capped_summary(rows: Sequence[Row], feature: str, level: int) -> str:
    """Gateways that cannot serve ``feature=level``, grouped by what they support, what
    caps them (``cap``: their own catalogues, else their upstreams) and what the level
    needs (one phrase per group: a fleet's old gateways alike)."""
    groups: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    for b in rows:
        have = b.get("max_level")
        supports = (
            "do not list the feature (level 0 only)"
            if have is None
            else f"support {b.get('min_level')}-{have}"
        )
        groups[(supports, b.get("lacks") or "", b.get("cap") == CATALOGUE)].append(b["gateway_id"])
    said = []
    for (supports, lacks, own), gateways in groups.items():
        if not lacks:
            why = ""
        elif own:
            why = (
                f": their own catalogues cap them, not their upstreams; "
                f"{feature}={level} needs {lacks}"
            )
        else:
            why = f": their upstreams do not offer {lacks}, which {feature}={level} needs"
        said.append(f"{', '.join(sorted(gateways))} {supports}{why}")
    return "; ".join(said)
