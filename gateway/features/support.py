"""What a gateway supports across its upstreams, and why finalized levels exceed it
(pure rules, no I/O).

A gateway serves each feature up to the level every one of its upstreams allows (one
upstream beside a broker, several in cluster mode): per upstream, what the catalogue
makes of its own codec ∩ that upstream's API ranges, lowered to the broker's support
where the broker speaks for the feature (``report.supported_through``). A finalized
level above that makes the gateway refuse to start or turn unhealthy
(``gateway.server.features``); the reasons worked out here are what it says then, so
that they name what is missing: a feature the catalogue lacks, a level past its end, or
the API versions the upstream does not offer.

Apart from the gate that applies them because they are a function of the catalogue and
the per-upstream ranges alone, like the catalogue's own rules beside them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .catalogue import Catalogue, missing_for, supported
from .report import FeatureReport, supported_through

VersionRange = tuple[int, int]
# Per upstream: the API ranges available through it, and the features it reported.
Upstream = tuple[Mapping[int, VersionRange], FeatureReport]


def supported_across(
    catalogue: Catalogue, upstreams: Iterable[Upstream]
) -> dict[str, VersionRange]:
    """Per catalogue feature the (0, max) levels every one of ``upstreams`` allows."""
    per_upstream = [supported_through(supported(catalogue, a), f) for a, f in upstreams]
    return {name: (0, min(s[name][1] for s in per_upstream)) for name in catalogue}


def unsupported_levels(
    levels: Mapping[str, int],
    support: Mapping[str, VersionRange] | None,
    catalogue: Catalogue,
    ranges: Iterable[Mapping[int, VersionRange]],
) -> list[str]:
    """Why the finalized ``levels`` exceed ``support`` ([] when compatible, or while
    ``support`` is not known); ``ranges``: the API ranges available per upstream."""
    if support is None:
        return []
    per_upstream = list(ranges)
    problems = []
    for name, level in sorted(levels.items()):
        high = support.get(name, (0, 0))[1]
        if level <= high:
            continue
        spec = catalogue.get(name)
        if spec is None:
            why = "not in this gateway's feature catalogue"
        elif level > spec.max_level:
            why = f"the catalogue only goes up to level {spec.max_level}"
        else:
            missing = {str(g) for a in per_upstream for g in missing_for(spec, level, a)}
            why = (
                "the upstream lacks " + ", ".join(sorted(missing))
                if missing
                else "the upstream broker does not support that level"
            )
        problems.append(f"{name} finalized at level {level}, supported 0-{high} ({why})")
    return problems
