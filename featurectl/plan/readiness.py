"""``featurectl plan --release X``: can the brokers go to Kafka X, and who must move
first? Plain Python over rows already on the driver (no Spark).

* clients: every API version a client used in the window that X refuses (below the
  minimum its brokers accept, ``gateway.versions.accepted_versions``, which holds the
  one rule the advertised tables cannot show: Produce v0-2 from 4.0) or lacks (no
  version of the API), the version it needs instead and the first release of its
  library that speaks it (``libraries``);
* gateways: those whose protocol data (``kafka_gateway_info{protocol_kafka}``) is from
  a Kafka older than X, or whose catalogue lacks a feature X finalizes;
* features: what ``featurectl upgrade --release-version X`` finalizes, and which
  clients each level changes something for (the API versions it gates that they use).

A verdict per client: ``breaks on X``, ``works``, or ``works only through the
gateway's bridge``: X refuses what it used, and the gateways' version bridge carried
some of its requests in the window (its client records' ``bridged_requests``: it is in
front of a broker that refuses them already), so it keeps working as long as the bridge
serves it (``bridge_old_clients``, ``[bridge] policy``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from featurectl.plan.command_lines import featurectl_command, plan_again_command
from featurectl.plan.decide import CLIENT, client_label
from featurectl.plan.identities import Row, who
from featurectl.plan.libraries import first_release, library_of, pinned_remedy, speaks
from featurectl.releases import METADATA_VERSION, release_table
from gateway.features.catalogue import Catalogue
from gateway.protocol import api_name
from gateway.versions import accepted_versions, release_named

BREAKS = "breaks on {release}"
WORKS = "works"
BRIDGED = "works only through the gateway's bridge"


def refused_by(release: str, api_key: int, version: int) -> dict[str, Any] | None:
    """Why Kafka ``release`` refuses ``version`` of ``api_key`` (None: it accepts it, or
    the client negotiates down to its maximum)."""
    accepted = accepted_versions(release_named(release)).get(api_key)
    if accepted is None:
        return {"why": "lacks", "accepted": None, "needs": None}
    low, high = accepted
    if version < low:
        return {"why": "below minimum", "accepted": [low, high], "needs": low}
    return None


def client_readiness(
    release: str,
    usage: Iterable[Row],
    index: Mapping[tuple[Any, Any], Mapping[str, Any]],
    bridged: frozenset[tuple[Any, Any]] = frozenset(),
) -> list[dict[str, Any]]:
    """Per client software: what ``release`` refuses of what it used, and its verdict."""
    per: dict[tuple[Any, Any], dict[str, Any]] = {}
    for u in usage:
        key, version = u.get("api_key"), u.get("api_version")
        if key is None or version is None or key < 0 or version < 0:
            continue
        client = tuple(u[c] for c in CLIENT)
        p = per.setdefault(client, {"refused": {}, "gateways": set(), "requests": 0.0})
        p["requests"] += u.get("requests") or 0.0
        p["gateways"].update(u.get("gateways") or ())
        if not (u.get("requests") or 0) > 0:
            continue
        refused = refused_by(release, key, version)
        if refused is None:
            continue
        row = p["refused"].setdefault(
            (key, version),
            {"api_key": key, "api": u.get("api") or api_name(key), "api_version": version,
             "requests": 0.0, "last_seen": None, **refused},
        )  # fmt: skip
        row["requests"] += u.get("requests") or 0.0
        if u.get("last_seen") is not None:
            row["last_seen"] = max(row["last_seen"] or 0, u["last_seen"])
    out = []
    for client, p in per.items():
        labels = dict(zip(CLIENT, client, strict=True))
        library = library_of(*client)
        refused = [_remedy(r, library) for _, r in sorted(p["refused"].items())]
        if not refused:
            verdict = WORKS
        elif client in bridged:
            verdict = BRIDGED
        else:
            verdict = BREAKS.format(release=release)
        found = index.get(client) or {}
        out.append(
            {
                **labels,
                **who(labels, index),
                "library": library.name if library else None,
                "library_version": library.version if library else None,
                "gateways": sorted(set(found.get("gateways", [])) | p["gateways"]),
                "requests": p["requests"],
                "refused": refused,
                "verdict": verdict,
            }
        )
    return sorted(out, key=lambda c: (c["verdict"] == WORKS, -c["requests"], client_label(c)))


def _remedy(row: dict[str, Any], library: Any) -> dict[str, Any]:
    """The row with the first release of the client's library that speaks what it needs,
    and what to do (unpin where the client's own release speaks it already)."""
    if row["needs"] is None:
        gone = f"{row['api']} is gone in this release: move the client off it"
        return {**row, "first_release": None, "remedy": gone}
    if library is None:
        unknown = (
            f"needs {row['api']} v{row['needs']} or later: upgrade the client (its library "
            "is not in featurectl/data/client_libraries.json)"
        )
        return {**row, "first_release": None, "remedy": unknown}
    first = first_release(library.name, row["api_key"], row["needs"])
    guess = " (library guessed from its client id)" if library.guessed else ""
    if speaks(library, first):
        text = (f"{library.name} {library.version} speaks {row['api']} v{row['needs']}+ "
                f"already: it is pinned; {pinned_remedy(library.name)}{guess}")  # fmt: skip
    elif first is not None:
        text = (f"upgrade {library.name} to {first.text()} or later, or "
                f"{pinned_remedy(library.name)} if it is new enough{guess}")  # fmt: skip
    else:
        text = (f"needs {row['api']} v{row['needs']}+; the table does not say which "
                f"{library.name} release speaks it{guess}")  # fmt: skip
    return {**row, "first_release": first.text() if first else None, "remedy": text}


def gateway_readiness(
    release: str,
    gateways: Sequence[Mapping[str, Any]],
    support: Iterable[tuple[str, str, int | None, int | None]],
    catalogue: Catalogue,
) -> list[dict[str, Any]]:
    """Per gateway (``gateway_id``, ``gateway_version``, ``protocol_kafka``): whether its
    protocol data knows ``release`` and its catalogue lists what the release finalizes
    (of the planner's catalogue: a gateway lists every feature of its own)."""
    target = release_named(release).number
    listed: dict[str, set[str]] = defaultdict(set)
    for gateway_id, feature, *_ in support:
        listed[gateway_id].add(feature)
    needed = [f for f, level in release_levels(release).items() if level > 0 and f in catalogue]
    out = []
    for g in gateways:
        problems = []
        data = g.get("protocol_kafka")
        if not data or data == "unknown":
            problems.append("does not say which Kafka its protocol data is from (older gateway)")
        elif tuple(int(p) for p in data.split(".")[:2]) < target:
            problems.append(f"its protocol data is from Kafka {data}, older than {release}")
        if g["gateway_id"] in listed:
            missing = [f for f in needed if f not in listed[g["gateway_id"]]]
            if missing:
                problems.append(f"its catalogue lacks {', '.join(missing)}")
        out.append({**g, "ready": not problems, "problems": problems})
    return sorted(out, key=lambda g: (g["ready"], g["gateway_id"]))


def release_levels(release: str) -> dict[str, int]:
    """The levels ``upgrade --release-version`` sets (not metadata.version, which the
    brokers own); none for a release before feature levels."""
    try:
        levels = release_table().levels(release)
    except KeyError:
        return {}
    return {f: level for f, level in sorted(levels.items()) if f != METADATA_VERSION}


def feature_readiness(
    release: str,
    finalized: Mapping[str, int],
    catalogue: Catalogue,
    usage: Iterable[Row],
) -> list[dict[str, Any]]:
    """What ``upgrade --release-version`` raises, and the clients each level changes
    something for: those that used an API it gates (they may negotiate the newer
    versions once it is finalized)."""
    users: dict[int, set[str]] = defaultdict(set)
    for u in usage:
        if u.get("api_key") is not None and (u.get("requests") or 0) > 0:
            users[u["api_key"]].add(client_label(u))
    out = []
    for feature, level in release_levels(release).items():
        now = finalized.get(feature, 0)
        if level <= now:
            continue
        spec = catalogue.get(feature)
        gates = [g for lvl, g in spec.gates_up_to(level) if lvl > now] if spec else []
        apis = sorted({(g.api_key, g.min_version) for g in gates})
        changed = sorted({c for key, _ in apis for c in users.get(key, ())})
        out.append(
            {
                "feature": feature,
                "from": now,
                "to": level,
                "apis": [f"{api_name(k)} v{v}+" for k, v in apis],
                "clients": changed,
            }
        )
    return out


def readiness(
    release: str,
    usage: Sequence[Row],
    index: Mapping[tuple[Any, Any], Mapping[str, Any]],
    gateways: Sequence[Mapping[str, Any]],
    state: Any,
    catalogue: Catalogue,
) -> dict[str, Any]:
    """The "release X readiness" section of plan.json (``state``: ``live_state.LiveState``)."""
    row = release_named(release)
    bridged = frozenset(k for k, m in index.items() if m.get("bridged_requests", 0) > 0)
    clients = client_readiness(row.name, usage, index, bridged)
    gates = gateway_readiness(row.name, gateways, state.support, catalogue)
    features = feature_readiness(row.name, state.finalized, catalogue, usage)
    breaking = [c for c in clients if c["verdict"] == BREAKS.format(release=row.name)]
    return {
        "release": row.name,
        "kafka": row.kafka,
        "safe": not breaking and all(g["ready"] for g in gates),
        "clients": clients,
        "gateways": gates,
        "features": features,
        "steps": release_steps(row.name, breaking, gates, features, state.doc),
    }


def release_steps(
    release: str,
    breaking: Sequence[Mapping[str, Any]],
    gateways: Sequence[Mapping[str, Any]],
    features: Sequence[Mapping[str, Any]],
    state: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """In order: clients to move, gateways to upgrade, the brokers' roll, the finalize;
    each command runs again as printed (a re-plan, a no-op finalize)."""
    again = plan_again_command(state, release)
    steps = []
    for c in breaking:
        what = "; ".join(f"{r['api']} v{r['api_version']}: {r['remedy']}" for r in c["refused"])
        ids = ", ".join(c.get("client_ids") or []) or "client ids unknown"
        peers = ", ".join(c.get("peers") or []) or "addresses unknown"
        steps.append({"kind": "move client", "action": f"{client_label(c)} ({ids}; {peers}): "
                      f"{what}", "command": again})  # fmt: skip
    for g in gateways:
        if not g["ready"]:
            steps.append({"kind": "upgrade gateway", "command": again,
                          "action": f"{g['gateway_id']} ({g.get('gateway_version') or '?'}): "
                          f"{'; '.join(g['problems'])}; upgrade it in place "
                          "(docs/upgrade-in-place.md)"})  # fmt: skip
    steps.append({"kind": "roll brokers", "command": again,
                  "action": f"roll the brokers to Apache Kafka {release}, one at a time, once "
                  "the plan above says nothing breaks (the re-plan must exit 0)"})  # fmt: skip
    if features:
        steps.append({"kind": "finalize", "action": "finalize the release's feature levels: "
                      + ", ".join(f"{f['feature']} {f['from']} → {f['to']}" for f in features),
                      "command": featurectl_command("upgrade", state)
                      + f" --release-version {release}"})  # fmt: skip
    return [{"step": i, **s} for i, s in enumerate(steps, 1)]


def gateway_infos(
    label_rows: Iterable[Row], registrations: Sequence[Mapping[str, Any]], live: Sequence[str]
) -> list[dict[str, Any]]:
    """Per live gateway: its version and protocol data's Kafka, from its
    ``kafka_gateway_info`` labels (else its registration)."""
    found: dict[str, dict[str, Any]] = {}
    for r in label_rows:
        gateway_id = r.get("info_gateway_id")
        if gateway_id and r.get("gateway_version"):
            found[gateway_id] = {
                "gateway_version": r["gateway_version"],
                "protocol_kafka": r.get("protocol_kafka"),
            }
    versions = {r["gateway_id"]: r.get("gateway_version") for r in registrations}
    ids = list(live) or sorted(found)
    return [
        {
            "gateway_id": g,
            "gateway_version": found.get(g, {}).get("gateway_version") or versions.get(g),
            "protocol_kafka": found.get(g, {}).get("protocol_kafka"),
        }
        for g in ids
    ]


__all__ = [
    "BREAKS",
    "BRIDGED",
    "WORKS",
    "gateway_infos",
    "readiness",
    "refused_by",
    "release_levels",
]
