"""The plan's steps: what to do, in order, and the exact featurectl command of each.

Plain Python over the collected verdicts, blockers and clients (no Spark), so the
order and wording are testable on their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from featurectl.plan.caps import capped_summary
from featurectl.plan.clients import RECONNECT
from featurectl.plan.command_lines import collect_again_command, featurectl_command
from featurectl.plan.decide import client_label
from featurectl.plan.layout import iso_time


def _range(blocker: Mapping[str, Any]) -> str:
    if blocker.get("max_level") is None:
        return "does not list the feature, so supports level 0 only"
    return f"supports {blocker['min_level']}-{blocker['max_level']}"


def _risk(v: Mapping[str, Any]) -> tuple[Any, ...]:
    """Lower first: safe before unsafe; upgrades before downgrades before disables;
    then the fewest clients and requests affected."""
    kind = {"upgrade": 0, "downgrade": 1, "disable": 2}.get(v["kind"], 3)
    affected = len(v.get("blocking_clients", [])) + len(v.get("reconnecting_clients", []))
    return (not v["safe"], kind, affected, v.get("blocking_requests") or 0.0, v["feature"])


def dependency_order(
    verdicts: Sequence[Mapping[str, Any]],
    needs: Callable[[str, int], Mapping[str, int]] | None = None,
) -> list[Mapping[str, Any]]:
    """The verdicts to act on, in the order their features' dependencies allow (as
    kafka-features.sh's feature-dependencies knows them: a level that needs another
    feature at some level comes after the upgrade of that feature; a downgrade comes
    before the downgrade of what it needs), then by risk (``_risk``)."""
    if needs is None:
        from featurectl.releases import release_table

        needs = release_table().needs
    todo = [v for v in verdicts if v["kind"] != "noop"]
    by_feature = {v["feature"]: v for v in todo}
    after: dict[str, set[str]] = {v["feature"]: set() for v in todo}
    for v in todo:
        for other, level in needs(v["feature"], v["level"]).items():
            w = by_feature.get(other)
            if w is None:
                continue
            if v["kind"] == "upgrade" and w["kind"] == "upgrade" and w["level"] >= level:
                after[v["feature"]].add(other)  # raise what it needs first
            elif v["kind"] == "upgrade" and w["kind"] != "upgrade":
                after[v["feature"]].add(other)
    for w in todo:
        if w["kind"] in ("downgrade", "disable"):
            # What needs w at its current level goes down first.
            for v in todo:
                if v is w or v["kind"] not in ("downgrade", "disable"):
                    continue
                if needs(v["feature"], v["current_level"]).get(w["feature"], 0) > w["level"]:
                    after[w["feature"]].add(v["feature"])
    ordered: list[Mapping[str, Any]] = []
    placed: set[str] = set()
    while len(ordered) < len(todo):
        ready = [v for v in todo if v["feature"] not in placed and after[v["feature"]] <= placed]
        if not ready:  # a cycle (not in Kafka's tables): fall back to risk alone
            ready = [v for v in todo if v["feature"] not in placed]
        first = min(ready, key=_risk)
        ordered.append(first)
        placed.add(first["feature"])
    return ordered


def _broker_needs(
    v: Mapping[str, Any], needs: Callable[[str, int], Mapping[str, int]] | None
) -> str:
    """Kafka's dependencies of a level on features the gateways do not hold
    (metadata.version): the brokers' part, said in the step."""
    if v["kind"] != "upgrade":
        return ""
    if needs is None:
        from featurectl.releases import release_table

        needs = release_table().needs
    brokers = {k: n for k, n in needs(v["feature"], v["level"]).items() if k == "metadata.version"}
    if not brokers:
        return ""
    said = ", ".join(f"{k} >= {n}" for k, n in sorted(brokers.items()))
    return f" Kafka's brokers need {said} for this level (kafka-features.sh describe)."


def _who_text(x: Mapping[str, Any]) -> str:
    ids = x.get("client_ids") or []
    peers = x.get("peers") or []
    extra = []
    if ids:
        extra.append("client id " + ", ".join(ids[:3]) + (" …" if len(ids) > 3 else ""))
    if peers:
        extra.append("from " + ", ".join(peers[:5]) + (" …" if len(peers) > 5 else ""))
    return client_label(x) + (f" [{'; '.join(extra)}]" if extra else "")


def build_steps(
    verdicts: Sequence[Mapping[str, Any]],
    blockers: Sequence[Mapping[str, Any]],
    clients: Sequence[Mapping[str, Any]],
    state: Mapping[str, Any],
    needs: Callable[[str, int], Mapping[str, int]] | None = None,
) -> list[dict[str, Any]]:
    """The ordered steps: by feature dependencies, then safe and low-risk first, each
    target with its prerequisites before it.

    A step is ``{"step", "feature", "kind": manual|note|check|command, "action",
    "command", "safe_now"}``; ``command`` is None for work outside featurectl
    (upgrading a gateway, moving a client) and for notes (what clients will do).
    """
    steps: list[dict[str, Any]] = []

    def add(v: Mapping[str, Any], kind: str, action: str, command: str | None, safe: bool) -> None:
        steps.append(
            {
                "step": len(steps) + 1,
                "feature": v["feature"],
                "target_level": v["level"],
                "kind": kind,
                "action": action,
                "command": command,
                "safe_now": safe,
            }
        )

    for v in dependency_order(verdicts, needs):
        feature, level = v["feature"], v["level"]
        wanted = f"{feature}={level}"
        gateway_blockers = [b for b in blockers if b["feature"] == feature and b["level"] == level]
        if v["blocking_gateways"]:
            if all(b.get("lacks") for b in gateway_blockers):
                detail = capped_summary(gateway_blockers, feature, level)
            else:
                detail = "; ".join(
                    f"{b['gateway_id']} ({b.get('reason') or _range(b)})" for b in gateway_blockers
                )
            add(
                v,
                "manual",
                f"Upgrade these gateways, or the brokers behind them, until each supports "
                f"{wanted}: {detail}.",
                None,
                False,
            )
            add(
                v,
                "check",
                f"Check that {feature}'s SupportedMaxVersion is now >= {level}.",
                featurectl_command("describe", state) + f" --feature {feature}",
                False,
            )
        if v["kind"] == "upgrade" and not v["blocking_gateways"] and not v["safe"]:
            add(
                v,
                "manual",
                "Start (or register) at least one gateway: no live gateway vouches for the level.",
                None,
                False,
            )
        lost = v.get("losses")
        if lost is None:  # verdicts from before losses were judged: every user blocks
            lost = _losses_of_users(v, clients)
        switch = [x for x in lost if x["remedy"] == "switch"]
        reconnect = [x for x in lost if x["remedy"] == "reconnect"]
        if reconnect:
            detail = "; ".join(
                f"{_who_text(x)} ({x['api']} v{'/'.join(map(str, x['versions']))} → "
                f"v{x['allowed_max']} or lower)"
                for x in reconnect
            )
            add(
                v,
                "note",
                f"These clients negotiated versions that {wanted} withholds; each {RECONNECT}, "
                f"nothing to do: {detail}.",
                None,
                True,
            )
        if switch:
            detail = "; ".join(
                f"{_who_text(x)} ({x['api']} v{'/'.join(map(str, x['versions']))}, "
                f"{x.get('connections_now', 0):g} connections now, last seen "
                f"{iso_time(x.get('last_seen'))})"
                for x in switch
            )
            add(
                v,
                "manual",
                f"Move these clients off the API versions that need {feature} above "
                f"{level} ({switch[0]['remedy_text']}): {detail}.",
                None,
                False,
            )
            add(
                v,
                "check",
                "Collect again and check that nobody uses them any more.",
                collect_again_command(state, wanted),
                False,
            )
        if v["kind"] == "upgrade":
            add(
                v,
                "command",
                f"Finalize {wanted}.{_broker_needs(v, needs)}",
                featurectl_command("finalize", state, wanted),
                v["safe"],
            )
        elif v["kind"] == "downgrade":
            add(
                v,
                "command",
                f"Downgrade {feature} to {level}.",
                featurectl_command("downgrade", state, wanted),
                v["safe"],
            )
        else:
            add(
                v,
                "command",
                f"Disable {feature} (withdraw the API versions it gates).",
                featurectl_command("disable", state, feature),
                v["safe"],
            )
    return steps


def _losses_of_users(v: Mapping[str, Any], clients: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Without a judged ``losses`` list: every blocking client's rows, to be moved."""
    if not v.get("blocking_clients"):
        return []
    out = []
    for c in clients:
        if c["feature"] == v["feature"] and c["level"] > v["level"] and c["requests"] > 0:
            out.append(
                {
                    **c,
                    "versions": [c["api_version"]],
                    "remedy": "switch",
                    "remedy_text": "upgrade or reconfigure them",
                }
            )
    return out


__all__ = [
    "build_steps",
    "dependency_order",
]
