"""Who the plan is about: client identities, refusals (who is broken now, who wants a
feature it cannot get), what each target level takes from whom and the right remedy,
and why a level is capped. Plain Python over rows already on the driver (no Spark).

Inputs:

* identities: the gateways' client records (``readers.read_clients``: software, client
  id, peer addresses, first/last seen, versions used and refused per gateway); absent
  (an older gateway, a dataset without ``clients/``) the metric labels are all there is;
* refusals: ``kafka_gateway_rejected_requests_total`` increases per label set
  (``tally.refusal_usage``); a gateway from before refusals were labelled by API and
  client counts them by ``reason`` only, and the plan says so;
* usage: ``tally.api_usage`` rows (every API version each client software used).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gateway.features.catalogue import Catalogue, Gate, required_level

from .decide import CLIENT, client_label

Row = Mapping[str, Any]
# Peer addresses shown per client in the reports (plan.json keeps what the records had).
TOP_PEERS = 5

# What to do about a refusal no feature level fixes, by reason.
REASON_REMEDIES = {
    "unknown_api_key": "the client sent an API key the gateway does not know: upgrade the "
    "gateways (or the brokers) if the API is new, else check the client",
    "malformed_frame": "the client sent frames the gateway cannot read: check the client "
    "(or that it speaks Kafka's protocol at all)",
    "malformed_request": "a request body did not decode: upgrade the client library",
    "oversize_frame": "frames above the gateway's limit: raise it or lower the client's "
    "batch/fetch sizes",
    "invalid_client_software": "its KIP-511 client software name or version is invalid: fix "
    "client.software.name/version in the client",
    "unauthorized": "the client is not allowed to do this (TLS/SASL principal, allowed "
    "addresses): grant it or stop the client from trying",
    "handler_error": "an interceptor failed on its request: see the gateway log "
    "(request.handler_failed) and report it",
}
UNATTRIBUTED = (
    "the gateways counted these by reason only (a gateway from before refusals were "
    "labelled by API and client): upgrade the gateways to see which client and API"
)


# -- identities --------------------------------------------------------------------------


def load_identities(metrics: str) -> list[dict[str, Any]]:
    """``readers.read_clients(metrics)``, or [] where the dataset (or this build) has none.

    Imported lazily: the reader lives beside the Spark readers, and a planner built
    before it exists still plans from the metric labels.
    """
    try:
        from featurectl.plan import readers
    except ImportError:  # no PySpark: nothing to read
        return []
    read = getattr(readers, "read_clients", None)
    if read is None:
        return []
    try:
        return list(read(metrics) or [])
    except (FileNotFoundError, NotADirectoryError):
        return []
    except Exception as exc:  # a damaged record must not cost the whole plan
        print(
            f"warning: client records under {metrics} unreadable ({exc!r}); "
            "naming clients by their metric labels only",
            file=sys.stderr,
        )
        return []


def to_ms(value: Any) -> int | None:
    """A time as the records may hold it (epoch s or ms, ISO text, datetime) in epoch ms."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(stamp.timestamp() * 1000)
    if isinstance(value, int | float):
        return int(value * 1000) if value < 1e11 else int(value)
    try:
        return to_ms(datetime.fromisoformat(str(value).replace("Z", "+00:00")))
    except ValueError:
        return None


def _key(row: Row) -> tuple[Any, Any]:
    return (row.get("software_name"), row.get("software_version"))


def identity_index(identities: Iterable[Row]) -> dict[tuple[Any, Any], dict[str, Any]]:
    """Per client software (name, version): client ids, peers (most connections first),
    first and last seen, gateways and connections opened, over every gateway's record."""
    merged: dict[tuple[Any, Any], dict[str, Any]] = {}
    peers: dict[tuple[Any, Any], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in identities:
        key = _key(r)
        m = merged.setdefault(
            key,
            {
                "client_ids": set(),
                "gateways": set(),
                "fingerprints": set(),
                "first_seen": None,
                "last_seen": None,
                "connections_opened": 0,
            },
        )
        if r.get("client_id"):
            m["client_ids"].add(str(r["client_id"]))
        if r.get("gateway_id"):
            m["gateways"].add(str(r["gateway_id"]))
        if r.get("fingerprint"):
            m["fingerprints"].add(str(r["fingerprint"]))
        opened = int(r.get("connections_opened") or 0)
        m["connections_opened"] += opened
        for peer in r.get("peers") or ():
            peers[key][str(peer)] += max(1, opened)
        first, last = to_ms(r.get("first_seen")), to_ms(r.get("last_seen"))
        if first is not None:
            m["first_seen"] = first if m["first_seen"] is None else min(m["first_seen"], first)
        if last is not None:
            m["last_seen"] = last if m["last_seen"] is None else max(m["last_seen"], last)
    out = {}
    for key, m in merged.items():
        ranked = sorted(peers[key].items(), key=lambda item: (-item[1], item[0]))
        out[key] = {
            **m,
            "client_ids": sorted(m["client_ids"]),
            "gateways": sorted(m["gateways"]),
            "fingerprints": sorted(m["fingerprints"]),
            "peers": [p for p, _ in ranked],
        }
    return out


def who(row: Row, index: Mapping[tuple[Any, Any], Mapping[str, Any]]) -> dict[str, Any]:
    """The client ids and addresses of a row's client software (empty when unknown)."""
    found = index.get(tuple(row.get(c) for c in CLIENT)) or {}
    return {
        "client_ids": list(found.get("client_ids", [])),
        "peers": list(found.get("peers", [])),
    }


def refusals_from_identities(identities: Iterable[Row]) -> list[dict[str, Any]]:
    """Refusal rows from the client records' ``versions_refused`` (when the refusal
    counter has no API or client labels, the records still say who and what)."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in identities:
        for v in r.get("versions_refused") or ():
            key = (v.get("reason"), v.get("api_key"), v.get("api"), v.get("api_version"), *_key(r))
            g = groups.setdefault(
                key,
                {
                    **dict(
                        zip(
                            ("reason", "api_key", "api", "api_version", *CLIENT),
                            key,
                            strict=True,
                        )
                    ),
                    "requests": 0.0,
                    "first_seen": None,
                    "last_seen": None,
                    "gateways": set(),
                },
            )
            g["requests"] += float(v.get("count") or 0)
            g["gateways"].add(r.get("gateway_id"))
            first, last = to_ms(r.get("first_seen")), to_ms(r.get("last_seen"))
            if first is not None and (g["first_seen"] is None or first < g["first_seen"]):
                g["first_seen"] = first
            if last is not None and (g["last_seen"] is None or last > g["last_seen"]):
                g["last_seen"] = last
    return [
        {**g, "gateways": sorted(x for x in g["gateways"] if x)}
        for g in groups.values()
        if g["requests"] > 0
    ]


def attributed(row: Row) -> bool:
    """Whether a refusal says which API version it was (labels from a newer gateway)."""
    return row.get("api_key") not in (None, -1) and row.get("api_version") not in (None, -1)


# -- refusals ----------------------------------------------------------------------------


def _gate_text(gate: Gate) -> str:
    text = str(gate)
    if ">=" in text:
        name, _, version = text.partition(">=")
        return f"{name} v{version}+"
    return f"{text} (every version)"


def classify_refusals(
    refusals: Iterable[Row],
    catalogue: Catalogue,
    finalized: Mapping[str, int],
    features: Sequence[Row],
    usage: Sequence[Row],
    index: Mapping[tuple[Any, Any], Mapping[str, Any]],
    state: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(broken now, wants a feature it cannot get): each refusal row with ``remedy``,
    ``client_ids`` and ``peers``; the second also ``feature``/``level`` (what would
    give it) and ``command`` where finalizing it is possible now."""
    from .steps import featurectl_command

    cluster_max = {f["feature"]: f.get("cluster_max_level") for f in features}
    used: dict[int, list[int]] = defaultdict(list)
    for u in usage:
        if u.get("api_key") is not None and u.get("api_version") is not None:
            used[u["api_key"]].append(u["api_version"])
    broken, wants = [], []
    for r in refusals:
        row = {**r, **who(r, index)}
        if not attributed(r):
            known = r.get("client_software_name") is not None
            if known and r.get("reason") in REASON_REMEDIES:
                remedy = REASON_REMEDIES[r["reason"]]
            else:
                remedy = UNATTRIBUTED
            broken.append({**row, "remedy": remedy})
            continue
        need = required_level(catalogue, r["api_key"], r["api_version"])
        if need is not None and need[1] > finalized.get(need[0], 0):
            feature, level = need
            high = cluster_max.get(feature)
            if high is not None and high >= level:
                command = featurectl_command("finalize", state or {}, f"{feature}={level}")
                remedy = f"finalize {feature}={level} (every live gateway supports it)"
            else:
                command = None
                remedy = (
                    f"needs {feature}={level}, which not every live gateway supports yet "
                    f"(highest everywhere: {high}): upgrade the brokers behind them first"
                )
            wants.append(
                {**row, "feature": feature, "level": level, "remedy": remedy, "command": command}
            )
            continue
        if r["reason"] in ("unsupported_version", "gated_by_feature"):
            remedy = _version_remedy(r, used.get(r["api_key"], []))
        else:
            remedy = REASON_REMEDIES.get(
                r["reason"], f"refused ({r['reason']}): see the gateway log"
            )
        broken.append({**row, "remedy": remedy})
    order = lambda x: (-(x.get("requests") or 0.0), client_label(x), x.get("api_key") or -1)  # noqa: E731
    return sorted(broken, key=order), sorted(wants, key=order)


def _version_remedy(row: Row, versions_in_use: Sequence[int]) -> str:
    api, version, software = row.get("api"), row["api_version"], row.get("client_software_name")
    pinned = (
        " (kafka-python: leave api_version unset instead of pinning it)"
        if software in ("kafka-python", "kafka-python-ng")
        else ""
    )
    if versions_in_use and version < min(versions_in_use):
        return (
            f"{api} v{version} is older than the brokers behind the gateway accept (others use "
            f"v{min(versions_in_use)}-v{max(versions_in_use)}): the library cannot speak an "
            f"allowed version as configured; upgrade the library or unpin its protocol "
            f"version{pinned}"
        )
    if versions_in_use and version > max(versions_in_use):
        return (
            f"{api} v{version} is newer than the gateway offers (others use up to "
            f"v{max(versions_in_use)}): the client did not negotiate; let it use ApiVersions "
            "(unpin its protocol version) or upgrade the brokers"
        )
    return (
        f"{api} v{version} is not offered: upgrade the library or unpin its protocol "
        f"version{pinned}"
    )


# -- what a target takes from whom --------------------------------------------------------


def withheld_cap(catalogue: Catalogue, feature: str, level: int, api_key: int) -> int | None:
    """The highest version of ``api_key`` still allowed with ``feature`` at ``level``
    (-1: none; None: ``feature`` does not gate that API above ``level``)."""
    spec = catalogue.get(feature)
    if spec is None:
        return None
    cap = None
    for gates in spec.levels[level:]:
        for gate in gates:
            if gate.api_key == api_key:
                cap = gate.min_version - 1 if cap is None else min(cap, gate.min_version - 1)
    return cap


RECONNECT = (
    "reconnects and renegotiates (the gateway closes such connections after in-flight "
    "requests are answered)"
)


def losses(
    verdict: Row,
    clients: Iterable[Row],
    catalogue: Catalogue,
    index: Mapping[tuple[Any, Any], Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Per client software and API, the versions a downgrade/disable withholds from it
    and the right remedy: ``reconnect`` where a lower version of the API stays allowed
    (clients negotiate at connect), ``switch`` where none does (the API goes)."""
    if verdict["kind"] not in ("downgrade", "disable"):
        return []
    feature, level = verdict["feature"], verdict["level"]
    groups: dict[tuple[Any, ...], list[Row]] = defaultdict(list)
    for c in clients:
        if (
            c["feature"] == feature
            and c.get("level") is not None
            and c["level"] > level
            and (c.get("requests") or 0) > 0
        ):
            groups[(*(c[k] for k in CLIENT), c["api_key"], c["api"])].append(c)
    out = []
    for (name, version, api_key, api), rows in groups.items():
        cap = withheld_cap(catalogue, feature, level, api_key)
        cap = -1 if cap is None else cap
        used = sorted({r["api_version"] for r in rows})
        if cap >= 0:
            remedy = "reconnect"
            text = f"{api} v{cap} or lower stays allowed: the client {RECONNECT}"
        else:
            remedy = "switch"
            hint = " (KIP-848 consumers: group.protocol=classic)" if api_key == 68 else ""
            text = (
                f"no version of {api} remains at {feature}={level}: move the client off it"
                f"{hint}, or keep {feature} at {verdict['current_level']}"
            )
        base = {"client_software_name": name, "client_software_version": version}
        out.append(
            {
                **base,
                **who(base, index),
                "api_key": api_key,
                "api": api,
                "versions": used,
                "allowed_max": cap,
                "requests": float(sum(r["requests"] or 0 for r in rows)),
                "connections_now": max((r.get("connections_now") or 0.0) for r in rows),
                "last_seen": max((r.get("last_seen") or 0) for r in rows) or None,
                "remedy": remedy,
                "remedy_text": text,
            }
        )
    return sorted(out, key=lambda x: (x["remedy"] != "switch", -x["requests"], client_label(x)))


# -- why a level is capped ----------------------------------------------------------------


def missing_gates(catalogue: Catalogue, feature: str, have: int | None, want: int) -> list[str]:
    """The gates of ``feature``'s levels above ``have`` up to ``want``: what a gateway
    whose upstream supports only ``have`` lacks at least one of."""
    spec = catalogue.get(feature)
    if spec is None:
        return []
    start = 0 if have is None else have
    return [_gate_text(g) for gates in spec.levels[start:want] for g in gates]


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


# -- the API-version-by-client table ------------------------------------------------------


def versions_by_client(
    usage: Iterable[Row],
    gated: set[tuple[int, int]],
    index: Mapping[tuple[Any, Any], Mapping[str, Any]],
    refusals: Iterable[Row] = (),
) -> list[dict[str, Any]]:
    """Per client software: the API versions it used (``api``: sorted versions, gated
    ones marked), requests, first/last seen (the records' where there are), gateways,
    client ids and addresses, and what it was refused."""
    per: dict[tuple[Any, Any], dict[str, Any]] = {}
    for u in usage:
        key = tuple(u[k] for k in CLIENT)
        p = per.setdefault(
            key,
            {
                "apis": defaultdict(set),
                "requests": 0.0,
                "first_seen": None,
                "last_seen": None,
                "gateways": set(),
                "refused": [],
            },
        )
        if u.get("api") is not None and u.get("api_version") is not None:
            p["apis"][(u.get("api_key"), u["api"])].add(u["api_version"])
        p["requests"] += u.get("requests") or 0.0
        p["gateways"].update(u.get("gateways") or ())
        for field, pick in (("first_seen", min), ("last_seen", max)):
            if u.get(field) is not None:
                p[field] = u[field] if p[field] is None else pick(p[field], u[field])
    for r in refusals:
        if attributed(r) and (r.get("requests") or 0) > 0:
            key = tuple(r[k] for k in CLIENT)
            if key in per:
                per[key]["refused"].append(f"{r['api']} v{r['api_version']} ({r['reason']})")
    out = []
    for key, p in per.items():
        found = index.get(key) or {}
        apis = []
        for (api_key, api), versions in sorted(p["apis"].items(), key=lambda i: i[0][0] or -1):
            marked = [f"{v}*" if (api_key, v) in gated else str(v) for v in sorted(versions)]
            apis.append({"api": api, "api_key": api_key, "versions": marked})
        out.append(
            {
                **dict(zip(CLIENT, key, strict=True)),
                "client_ids": list(found.get("client_ids", [])),
                "peers": list(found.get("peers", [])),
                "apis": apis,
                "requests": p["requests"],
                # The gateway's own record of the client, where there is one: the
                # counters only say when a series first counted within the window.
                "first_seen": found.get("first_seen") or p["first_seen"],
                "last_seen": max(
                    (x for x in (found.get("last_seen"), p["last_seen"]) if x is not None),
                    default=None,
                ),
                "gateways": sorted(set(found.get("gateways", [])) | p["gateways"]),
                "refused": sorted(set(p["refused"])),
            }
        )
    return sorted(out, key=lambda x: (-x["requests"], client_label(x)))


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


__all__ = [
    "REASON_REMEDIES",
    "RECONNECT",
    "TOP_PEERS",
    "UNATTRIBUTED",
    "annotate_verdicts",
    "attributed",
    "cap_reason",
    "capped_summary",
    "classify_refusals",
    "identity_index",
    "lacks_text",
    "load_identities",
    "losses",
    "missing_gates",
    "refusals_from_identities",
    "to_ms",
    "versions_by_client",
    "who",
    "withheld_cap",
]


def annotate_verdicts(
    verdicts: list[dict[str, Any]],
    client_rows: Sequence[Row],
    catalogue: Catalogue,
    index: Mapping[tuple[Any, Any], Mapping[str, Any]],
) -> None:
    """Add ``losses`` to each downgrade/disable verdict and judge it by them: clients
    that only reconnect (a lower version of the API stays allowed) do not block it;
    those that would lose an API altogether do (``blocking_clients``), and
    ``reconnecting_clients`` names the others."""
    for v in verdicts:
        lost = losses(v, client_rows, catalogue, index)
        v["losses"] = lost
        if v["kind"] not in ("downgrade", "disable"):
            v["reconnecting_clients"] = []
            continue
        switch = {(x["client_software_name"], x["client_software_version"]) for x in lost
                  if x["remedy"] == "switch"}  # fmt: skip
        reconnect = {(x["client_software_name"], x["client_software_version"]) for x in lost
                     if x["remedy"] == "reconnect"} - switch  # fmt: skip
        v["blocking_clients"] = [
            c for c in v["blocking_clients"] if tuple(c[k] for k in CLIENT) in switch
        ]
        v["reconnecting_clients"] = [
            dict(zip(CLIENT, pair, strict=True)) for pair in sorted(reconnect, key=str)
        ]
        v["safe"] = not v["blocking_gateways"] and not v["blocking_clients"]
