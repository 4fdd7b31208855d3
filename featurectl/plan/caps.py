"""Why a level is capped: the API versions a gateway's upstream lacks that the level
needs, said briefly, per gateway and grouped across a fleet (plain Python, no Spark).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gateway.features.catalogue import Catalogue, Gate

from .identities import Row, attributed


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


def cap_reason(
    blocker: Row,
    catalogue: Catalogue,
    registrations: Mapping[str, Row],
    refusals: Iterable[Row] = (),
) -> str:
    """Why ``blocker``'s gateway cannot serve the target level, naming the API versions."""
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
    """Gateways that cannot serve ``feature=level``, grouped by what they support and
    what their upstreams lack (one phrase per group: a fleet's old gateways alike)."""
    groups: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    for b in rows:
        have = b.get("max_level")
        supports = (
            "do not list the feature (level 0 only)"
            if have is None
            else f"support {b.get('min_level')}-{have}"
        )
        groups[(supports, b.get("lacks") or "")].append(b["gateway_id"])
    said = []
    for (supports, lacks), gateways in groups.items():
        why = (
            f": their upstreams do not offer {lacks}, which {feature}={level} needs"
            if lacks
            else ""
        )
        said.append(f"{', '.join(sorted(gateways))} {supports}{why}")
    return "; ".join(said)
