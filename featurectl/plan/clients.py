"""What the plan says of clients: refusals (who is broken now, who wants a feature it
cannot get), what each target level takes from whom and the right remedy, and the
API-version-by-client table. Plain Python over rows already on the driver (no Spark).
Who a client is comes from ``identities``; why a level is capped from ``caps``.

Inputs:

* refusals: ``kafka_gateway_rejected_requests_total`` increases per label set
  (``tally.refusal_usage``); a gateway from before refusals were labelled by API and
  client counts them by ``reason`` only, and the plan says so;
* usage: ``tally.api_usage`` rows (every API version each client software used).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gateway.features.catalogue import Catalogue, required_level

from .command_lines import featurectl_command
from .decide import CLIENT, client_label
from .identities import Row, attributed, who

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
# ApiVersions (key 18) is the one API whose too-new request is part of the protocol: the
# broker (or gateway) answers it with UNSUPPORTED_VERSION and its own range, in the v0
# format, and the client retries at a version in that range on the same connection
# (KIP-511). Such a refusal is negotiation, not breakage: the client got what it needed.
API_VERSIONS_KEY = 18
NEGOTIATION = (
    "ApiVersions requests newer than the gateways answer were refused the KIP-511 way "
    "(UNSUPPORTED_VERSION with the supported range) and retried lower on the same "
    "connection: negotiation, not breakage; not counted as refused."
)


def is_negotiation(row: Row) -> bool:
    """Whether a refusal row is ApiVersions negotiation (``NEGOTIATION``), not breakage."""
    return row.get("api_key") == API_VERSIONS_KEY and row.get("reason") == "unsupported_version"


def negotiated(refusals: Iterable[Row]) -> list[dict[str, Any]]:
    """The refusal rows that were ApiVersions negotiation (see ``is_negotiation``)."""
    return [dict(r) for r in refusals if is_negotiation(r) and (r.get("requests") or 0) > 0]


# -- refusals ----------------------------------------------------------------------------


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
    ``client_ids``, ``peers`` and ``principals``; the second also ``feature``/``level`` (what would
    give it) and ``command`` where finalizing it is possible now."""

    cluster_max = {f["feature"]: f.get("cluster_max_level") for f in features}
    used: dict[int, list[int]] = defaultdict(list)
    for u in usage:
        if u.get("api_key") is not None and u.get("api_version") is not None:
            used[u["api_key"]].append(u["api_version"])
    broken, wants = [], []
    for r in refusals:
        if is_negotiation(r):
            continue
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
                    f"(highest everywhere: {high}): upgrade the gateways that lack it, or "
                    f"the brokers behind them, first (the features table says which)"
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
        if attributed(r) and (r.get("requests") or 0) > 0 and not is_negotiation(r):
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
                "principals": list(found.get("principals", [])),
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
