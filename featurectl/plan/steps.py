"""The plan's steps: what to do, in order, and the exact featurectl command of each.

Plain Python over the collected verdicts, blockers and clients (no Spark), so the
order and wording are testable on their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from featurectl.plan.decide import client_label
from featurectl.plan.layout import iso_time
from gateway.commands import shell_command
from gateway.features.store import DEFAULT_CHROOT

# Shown in commands when no ZooKeeper address is known (dataset without snapshots).
ZOOKEEPER_PLACEHOLDER = "ZK_HOST:2181"


def featurectl_command(verb: str, state: Mapping[str, Any], *features: str) -> str:
    """The exact featurectl command line for ``verb`` against the plan's ZooKeeper, as a
    new shell where the plan ran runs it (``.venv/bin/featurectl`` from a checkout)."""
    parts = [shell_command("featurectl"), verb, *_where(state)]
    for feature in features:
        parts += ["--feature", feature]
    if verb in ("downgrade", "disable"):
        parts.append("--allow-downgrade")
    return " ".join(parts)


def _where(state: Mapping[str, Any]) -> list[str]:
    """--zookeeper (and --chroot unless the default): the gateways the plan is about."""
    where = ["--zookeeper", state.get("zookeeper") or ZOOKEEPER_PLACEHOLDER]
    chroot = state.get("chroot")
    if chroot and chroot != DEFAULT_CHROOT:
        where += ["--chroot", chroot]
    return where


def collect_again_command(state: Mapping[str, Any], wanted: str) -> str:
    """Collect 20 rounds from the same gateways, then plan ``wanted`` again with the
    same catalogue: the check after clients were moved."""
    featurectl, where = shell_command("featurectl"), " ".join(_where(state))
    catalogue = f" --catalogue {state['catalogue']}" if state.get("catalogue") else ""
    return (
        f"{featurectl} collect {where} --out metrics-recheck --rounds 20 && "
        f"{featurectl} plan --metrics metrics-recheck {where}{catalogue} --target {wanted}"
    )


def _range(blocker: Mapping[str, Any]) -> str:
    if blocker.get("max_level") is None:
        return "does not list the feature, so supports level 0 only"
    return f"supports {blocker['min_level']}-{blocker['max_level']}"


def build_steps(
    verdicts: Sequence[Mapping[str, Any]],
    blockers: Sequence[Mapping[str, Any]],
    clients: Sequence[Mapping[str, Any]],
    state: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """The ordered steps: targets safe now first, each with its prerequisites before it.

    A step is ``{"step", "feature", "kind": manual|check|command, "action", "command",
    "safe_now"}``; ``command`` is None for work outside featurectl (upgrading a gateway,
    moving a client).
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

    ordered = sorted(
        (v for v in verdicts if v["kind"] != "noop"), key=lambda v: (not v["safe"], v["feature"])
    )
    for v in ordered:
        feature, level = v["feature"], v["level"]
        wanted = f"{feature}={level}"
        gateway_blockers = [b for b in blockers if b["feature"] == feature and b["level"] == level]
        if v["blocking_gateways"]:
            detail = "; ".join(f"{b['gateway_id']} ({_range(b)})" for b in gateway_blockers)
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
        if v["blocking_clients"]:
            users = [
                c
                for c in clients
                if c["feature"] == feature and c["level"] > level and c["requests"] > 0
            ]
            detail = "; ".join(
                f"{client_label(c)} ({c['api']} v{c['api_version']}, "
                f"{c['connections_now']:g} connections now, last seen {iso_time(c['last_seen'])})"
                for c in users
            )
            add(
                v,
                "manual",
                f"Move these clients off the API versions that need {feature} above "
                f"{level} (upgrade or reconfigure them): {detail}.",
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
                f"Finalize {wanted}.",
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


__all__ = ["ZOOKEEPER_PLACEHOLDER", "build_steps", "collect_again_command", "featurectl_command"]
