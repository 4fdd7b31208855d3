"""The featurectl command lines a plan prints: exact, and runnable as printed from
where the plan ran (``gateway.commands.shell_command``), against the plan's ZooKeeper.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
    return _collect_then_plan(state, f"--target {wanted}")


def plan_again_command(state: Mapping[str, Any], release: str) -> str:
    """The same check for ``plan --release``: exits 0 once nothing breaks on it."""
    return _collect_then_plan(state, f"--release {release}")


def _collect_then_plan(state: Mapping[str, Any], plan_args: str) -> str:
    featurectl, where = shell_command("featurectl"), " ".join(_where(state))
    catalogue = f" --catalogue {state['catalogue']}" if state.get("catalogue") else ""
    return (
        f"{featurectl} collect {where} --out metrics-recheck --rounds 20 && "
        f"{featurectl} plan --metrics metrics-recheck {where}{catalogue} {plan_args}"
    )
