"""``featurectl finalize`` (alias ``upgrade``), ``downgrade`` and ``disable``: change the
cluster-wide finalized feature levels.

Over ZooKeeper: read the finalized levels and what every live gateway supports, let
``featurectl.features`` validate the update, and write it with a compare-and-set on the
epoch that was read. With ``--bootstrap-server``: UpdateFeatures requests to one gateway,
which validates and writes the same way. The output and exit codes are the same.
"""

from __future__ import annotations

import argparse
import getpass
import json
import socket
import sys
import time
from collections.abc import Mapping

from gateway.features.catalogue import load_catalogue
from gateway.features.store import EpochConflict
from gateway.features.validation import FeatureUpdate, validate_updates
from gateway.features.znode import Finalized
from gateway.observability.logging import configure_logging

from ..connect import feature_store, kafka_client
from ..exits import EXIT_OK, EXIT_REJECTED, CliError
from ..features import (
    Outcome,
    answered_plan,
    feature_updates,
    outcome_document,
    outcome_lines,
    plan_updates,
)
from ..kafka import update_features_range
from ..options import (
    check_feature_names,
)
from ..releases import release_table, release_updates

DOWNGRADE_REFUSED = (
    "refusing to downgrade: downgrading can make clients that use the newer API versions "
    "fail; pass --allow-downgrade to confirm (nothing was changed)"
)
DISABLE_REFUSED = (
    "refusing to disable: disabling withdraws the API versions a feature gates, so "
    "clients that use them can fail; pass --allow-downgrade to confirm (nothing was changed)"
)


def _known_features(finalized: Finalized, *supported: Mapping[str, tuple[int, int]]) -> set[str]:
    """What an update's --feature may name: as describe's rows (catalogue, gateways,
    finalized levels)."""
    known = set(load_catalogue()) | set(finalized.levels)
    for ranges in supported:
        known |= set(ranges)
    return known


def _feature_names(args: argparse.Namespace) -> list[str]:
    """The names --feature gave (NAME for disable, NAME=LEVEL otherwise); none with
    --release-version, whose names come from the release table."""
    if not args.feature:
        return []
    return [item if isinstance(item, str) else item[0] for item in args.feature]


def _operator(args: argparse.Namespace) -> dict[str, object]:
    """Who changes the levels, for the audit line: the ZooKeeper identity when there is
    one (what ACLs judge), else the operating-system user; from this host."""
    user = getpass.getuser()
    credentials = args.zookeeper_auth or getattr(args, "zookeeper_sasl", None)
    principal = f"zookeeper:{credentials.partition(':')[0]}" if credentials else f"os:{user}"
    return {
        "principal": principal,
        "address": socket.gethostname(),
        "via": "featurectl",
        "os_user": user,
    }


def _servable(finalized: Finalized, *supported: Mapping[str, tuple[int, int]]) -> set[str]:
    """Features --release-version may set: finalized ones, or ones a gateway can serve."""
    known = set(finalized.levels)
    for ranges in supported:
        known |= {name for name, (_, high) in ranges.items() if high >= 1}
    return known


def _supported_max(*supported: Mapping[str, tuple[int, int]]) -> dict[str, int]:
    """Per feature some gateway lists, describe's SupportedMaxVersion: the lowest max
    over the live gateways (one that does not list it supports level 0 only)."""
    names = {name for ranges in supported for name in ranges}
    return {name: min(ranges.get(name, (0, 0))[1] for ranges in supported) for name in names}


def _requested_updates(
    args: argparse.Namespace,
    finalized: Finalized,
    known: set[str],
    supported_max: Mapping[str, int] | None = None,
) -> list[FeatureUpdate]:
    """The FeatureUpdates the command line asks for, given the levels read.

    ``--release-version`` needs them: it moves only the features whose release level
    differs (notes on stderr say which were skipped and why).
    """
    unsafe = getattr(args, "unsafe", False)
    if args.command == "disable":
        return feature_updates("disable", [(name, 0) for name in args.feature], unsafe=unsafe)
    if args.release_version is None:
        return feature_updates(args.command, args.feature, unsafe=unsafe)
    levels = release_table().levels(args.release_version)
    wanted, notes = release_updates(
        levels, known, dict(finalized.levels), args.command, supported_max
    )
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return feature_updates(args.command, sorted(wanted.items()), unsafe=unsafe)


def _already_there(
    updates: list[FeatureUpdate], finalized: Finalized
) -> tuple[list[FeatureUpdate], list[str]]:
    """(the updates that change something, a line per feature already at its level).

    An operator re-running a step that is done (a plan's command pasted twice, a script
    that retries) expects a no-op, not the ZooKeeper-mode refusal "Can not upgrade ...
    to the same value" (KRaft also takes it as a no-op); disabling a feature that is
    not finalized is one too.
    """
    todo, done = [], []
    for update in updates:
        now = finalized.level(update.feature)
        if update.level == now:
            state = "not finalized" if now == 0 else f"already at level {now}"
            done.append(f"{update.feature}: {state} (nothing to change)")
        else:
            todo.append(update)
    return todo, done


def _all_done(args: argparse.Namespace, finalized: Finalized, done: list[str]) -> int:
    """Every update asked for is already in place: say so, exit 0."""
    if args.output == "json":
        document = {
            "command": args.command,
            "ok": True,
            "dry_run": bool(args.dry_run),
            "old_epoch": finalized.epoch,
            "new_epoch": None,
            "changes": [],
            "errors": [],
            "conflict": None,
            "unchanged": done,
        }
        print(json.dumps(document, indent=2))
    else:
        for line in done:
            print(line)
    return EXIT_OK


def _nothing_to_change(args: argparse.Namespace) -> int:
    message = (
        f"nothing to change: no feature the gateways serve is below (upgrade) or above "
        f"(downgrade) its Apache Kafka {args.release_version} level"
    )
    if args.output == "json":
        print(json.dumps({"command": args.command, "ok": True, "changes": []}, indent=2))
    print(message, file=sys.stderr)
    return EXIT_OK


def update(args: argparse.Namespace) -> int:
    if args.command != "finalize" and not args.allow_downgrade:
        refused = DOWNGRADE_REFUSED if args.command == "downgrade" else DISABLE_REFUSED
        raise CliError(EXIT_REJECTED, refused)
    if args.bootstrap_server is not None:
        outcome = _update_via_kafka(args)
        if outcome is None:
            return _nothing_to_change(args)
        if isinstance(outcome, tuple):
            return _all_done(args, *outcome)
    else:
        # The audit line (features.changed) goes to stderr as JSON, apart from the output.
        configure_logging("json", "info")
        with feature_store(args) as store:
            finalized = store.read()
            supported = store.supported_by_gateway()
            check_feature_names(
                _feature_names(args), _known_features(finalized, *supported.values())
            )
            known = _servable(finalized, *supported.values())
            updates = _requested_updates(
                args, finalized, known, _supported_max(*supported.values())
            )
            if not updates:
                return _nothing_to_change(args)
            updates, done = _already_there(updates, finalized)
            if not updates:
                return _all_done(args, finalized, done)
            for line in done:
                print(f"note: {line}", file=sys.stderr)
            plan = plan_updates(args.command, finalized, supported, updates)
            outcome = Outcome(plan, dry_run=args.dry_run)
            if plan.ok and not args.dry_run:
                try:
                    new_epoch = store.write(
                        plan.target,
                        expected_epoch=finalized.epoch,
                        old=finalized.levels,
                        who=_operator(args),
                    )
                    outcome = Outcome(plan, new_epoch=new_epoch)
                except EpochConflict as conflict:
                    outcome = Outcome(plan, conflict=conflict)
    out, err = outcome_lines(outcome)
    for line in err:
        print(line, file=sys.stderr)
    if args.output == "json":
        print(json.dumps(outcome_document(outcome), indent=2))
    else:
        for line in out:
            print(line)
    return EXIT_OK if outcome.ok else EXIT_REJECTED


def _update_via_kafka(args: argparse.Namespace) -> Outcome | tuple[Finalized, list[str]] | None:
    """finalize/downgrade/disable through a gateway; None when there is nothing to do,
    (levels read, a line per feature) when every update asked for is already in place.

    Validation first (UpdateFeatures v1 ValidateOnly, or locally against the gateway's
    advertised support from a v0-only peer), so that a refusal changes nothing and
    --dry-run is the gateway's own verdict. The write then uses v2 where offered (the
    gateway applies it all or nothing), else v1/v0 (Kafka applies the valid items of
    those; the validation just before makes that all of them).
    """
    with kafka_client(args) as client:
        described = client.describe()
        client.authenticate()
        finalized = described.finalized
        check_feature_names(_feature_names(args), _known_features(finalized, described.supported))
        known = _servable(finalized, described.supported)
        updates = _requested_updates(args, finalized, known, _supported_max(described.supported))
        if not updates:
            return None
        updates, done = _already_there(updates, finalized)
        if not updates:
            return finalized, done
        for line in done:
            print(f"note: {line}", file=sys.stderr)
        versions = update_features_range(described)
        if versions is None:
            raise CliError(
                EXIT_REJECTED,
                f"{args.bootstrap_server} does not offer UpdateFeatures (key 57); use --zookeeper",
            )
        if versions[1] >= 1:
            results, _, _ = client.update_features(1, updates, validate_only=True)
        else:
            gateways = {args.bootstrap_server: described.supported}
            results = list(validate_updates(finalized.levels, gateways, updates).results)
        plan = answered_plan(args.command, finalized, updates, results)
        if not plan.ok or args.dry_run:
            return Outcome(plan, dry_run=args.dry_run)
        results, _, _ = client.update_features(min(versions[1], 2), updates)
        written = answered_plan(args.command, finalized, updates, results)
        if not written.ok:
            return Outcome(written)
    return Outcome(written, new_epoch=_epoch_after(args, finalized.epoch))


def _epoch_after(args: argparse.Namespace, old: int) -> int:
    """The epoch a gateway serves after a write over ``old``, asked on a new connection:
    a change that withdraws versions closes the connections offered them (this one
    among them; gateway/server/withdrawn.py). The answering process served the new
    epoch before it answered (as Kafka does); another worker of the gateway may take
    a moment longer."""
    deadline = time.monotonic() + args.timeout
    while True:
        with kafka_client(args) as client:
            epoch = client.describe().finalized.epoch
        if epoch > old or time.monotonic() > deadline:
            return epoch
        time.sleep(0.05)
