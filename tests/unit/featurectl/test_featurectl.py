"""featurectl's pure parts: describe rows, update plans, their text/JSON, argument parsing.

No ZooKeeper here (tests/integration/test_featurectl.py runs the CLI against a real one);
command lines that are refused before connecting run in-process, and the ones that need
no connection at all (--version, output into a closed pipe) as processes.
"""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
from dataclasses import replace

import pytest
from rich.console import Console

from featurectl import cli
from featurectl.commands.update import DISABLE_REFUSED, DOWNGRADE_REFUSED
from featurectl.features import (
    FeatureRow,
    Outcome,
    describe_document,
    describe_rows,
    feature_updates,
    features_table,
    gateways_table,
    outcome_document,
    outcome_lines,
    plan_updates,
    withheld_lines,
)
from featurectl.options import DEFAULT_TIMEOUT_S, ZOOKEEPER_AUTH_ENV
from gateway import __version__
from gateway.commands import EXIT_SIGPIPE
from gateway.features.catalogue import parse_catalogue
from gateway.features.store import ZOOKEEPER_ENV, EpochConflict
from gateway.features.validation import UpgradeType
from gateway.features.znode import (
    Finalized,
    Registration,
    decode_registration,
    encode_registration,
)

CATALOGUE = parse_catalogue(
    {
        "features": {
            "group.version": {"description": "KIP-848", "levels": {"1": []}},
            "transaction.version": {"levels": {"1": [], "2": []}},
        }
    }
)


def registration(gateway_id: str, **features: tuple[int, int]) -> Registration:
    return Registration(
        gateway_id=gateway_id,
        listener=f"{gateway_id}:9092",
        upstream=f"broker-{gateway_id}:9093",
        features={name.replace("_", "."): rng for name, rng in features.items()},
        broker_software_name="Apache Kafka",
        broker_software_version="3.9",
        gateway_version="0.1.0",
    )


def render(table: object) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=1000, color_system=None).print(table)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def rows_by_feature(finalized: Finalized, *registrations: Registration) -> dict[str, FeatureRow]:
    return {r.feature: r for r in describe_rows(finalized, list(registrations), CATALOGUE)}


# -- describe rows ---------------------------------------------------------------------


def test_rows_cover_catalogue_registrations_and_finalized_features_sorted() -> None:
    rows = describe_rows(
        Finalized({"legacy.version": 1}, 3),
        [registration("gw-1", group_version=(0, 1), extra_version=(0, 2))],
        CATALOGUE,
    )
    assert [r.feature for r in rows] == [
        "extra.version",
        "group.version",
        "legacy.version",
        "transaction.version",
    ]


def test_supported_range_is_the_intersection_of_all_live_gateways() -> None:
    rows = rows_by_feature(
        Finalized(),
        registration("gw-1", transaction_version=(0, 2)),
        registration("gw-2", transaction_version=(1, 1)),
    )
    row = rows["transaction.version"]
    assert (row.supported_min, row.supported_max) == (1, 1)


def test_limited_by_names_the_gateways_holding_a_feature_back() -> None:
    rows = rows_by_feature(
        Finalized(),
        registration("gw-1", transaction_version=(0, 2)),
        registration("gw-2", transaction_version=(0, 1)),
        registration("gw-3", transaction_version=(0, 1)),
    )
    assert rows["transaction.version"].limited_by == ("gw-2", "gw-3")


def test_limited_by_is_empty_when_every_gateway_agrees() -> None:
    rows = rows_by_feature(
        Finalized(),
        registration("gw-1", group_version=(0, 1)),
        registration("gw-2", group_version=(0, 1)),
    )
    assert rows["group.version"].limited_by == ()


def test_a_gateway_that_does_not_know_a_feature_supports_only_level_0() -> None:
    rows = rows_by_feature(
        Finalized(),
        registration("gw-1", group_version=(0, 1)),
        registration("gw-old"),
    )
    row = rows["group.version"]
    assert (row.supported_min, row.supported_max, row.limited_by) == (0, 0, ("gw-old",))


def test_without_live_gateways_nothing_is_supported() -> None:
    row = rows_by_feature(Finalized())["group.version"]
    assert (row.supported_min, row.supported_max, row.limited_by) == (None, None, ())


def test_rows_carry_finalized_level_epoch_and_description() -> None:
    rows = rows_by_feature(Finalized({"group.version": 1}, 7))
    assert (rows["group.version"].finalized_level, rows["group.version"].epoch) == (1, 7)
    assert rows["group.version"].description == "KIP-848"
    assert rows["transaction.version"].finalized_level == 0


# -- describe output ---------------------------------------------------------------------


def test_features_table_uses_kafka_features_vocabulary_one_line_per_row() -> None:
    rows = describe_rows(
        Finalized({"group.version": 1}, 4),
        [
            registration("gw-1", group_version=(0, 1), transaction_version=(0, 2)),
            registration("gw-2", group_version=(0, 1), transaction_version=(0, 1)),
        ],
        CATALOGUE,
    )
    lines = render(features_table(rows))
    assert lines[0].split() == [
        "Feature",
        "SupportedMinVersion",
        "SupportedMaxVersion",
        "FinalizedVersionLevel",
        "Epoch",
        "LimitedBy",
    ]
    assert lines[2].split() == ["group.version", "0", "1", "1", "4", "-"]
    assert lines[3].split() == ["transaction.version", "0", "1", "0", "4", "gw-2"]
    assert len(lines) == 4


def test_features_table_shows_dashes_before_anything_is_finalized_or_live() -> None:
    lines = render(features_table(describe_rows(Finalized(), [], CATALOGUE)))
    assert lines[2].split() == ["group.version", "-", "-", "0", "-", "-"]


def test_gateways_table_lists_listener_upstream_software_and_version() -> None:
    unknown = Registration("gw-2", "h2:9092", "", {})
    lines = render(gateways_table([registration("gw-1"), unknown]))
    assert lines[0].split() == [
        "Gateway",
        "Listener",
        "Upstream",
        "BrokerSoftware",
        "GatewayVersion",
    ]
    assert lines[2].split() == [
        "gw-1",
        "gw-1:9092",
        "broker-gw-1:9093",
        "Apache",
        "Kafka",
        "3.9",
        "0.1.0",
    ]
    assert lines[3].split() == ["gw-2", "h2:9092", "-", "unknown", "unknown"]


def test_describe_says_what_the_brokers_finalized_above_the_gateways_levels() -> None:
    # gw-1's broker finalized group.version 1 and transaction.version 2; gw-2's reports
    # no features (Tansu) and says nothing; the store holds transaction.version 1 only.
    kafka = replace(
        registration("gw-1", group_version=(0, 1), transaction_version=(0, 2)),
        broker_finalized={"group.version": 1, "transaction.version": 2, "metadata.version": 27},
    )
    tansu = registration("gw-2", group_version=(0, 1), transaction_version=(0, 1))
    finalized = Finalized({"transaction.version": 1}, 4)
    rows = rows_by_feature(finalized, kafka, tansu)
    assert rows["group.version"].broker_finalized == 1
    assert rows["transaction.version"].broker_finalized == 2
    assert "metadata.version" not in rows  # not the gateways' to hold
    assert withheld_lines(rows.values()) == [
        "group.version: brokers finalized 1, gateways hold 0; clients get 0 "
        "(featurectl finalize --feature group.version=1 to serve 1)",
        # gw-2 serves transaction.version 1 at most: nothing to run.
        "transaction.version: brokers finalized 2, gateways hold 1; clients get 1 "
        "(no level above it is supported by every live gateway)",
    ]
    held = Finalized({"group.version": 1, "transaction.version": 2}, 5)
    assert withheld_lines(rows_by_feature(held, kafka, tansu).values()) == []
    assert rows_by_feature(finalized, tansu)["group.version"].broker_finalized is None


def test_a_registration_keeps_its_brokers_finalized_levels() -> None:
    with_levels = replace(registration("gw-1"), broker_finalized={"group.version": 1})
    for reg in (with_levels, registration("gw-2")):
        decoded = decode_registration(reg.gateway_id, encode_registration(reg))
        assert decoded.broker_finalized == reg.broker_finalized


def test_describe_document_keys() -> None:
    registrations = [registration("gw-1", group_version=(0, 1))]
    finalized = Finalized({"group.version": 1}, 2)
    doc = describe_document(
        finalized, describe_rows(finalized, registrations, CATALOGUE), registrations
    )
    assert doc["epoch"] == 2
    assert doc["features"][0] == {
        "feature": "group.version",
        "description": "KIP-848",
        "supported_min_version": 0,
        "supported_max_version": 1,
        "finalized_version_level": 1,
        "limited_by": [],
        "broker_finalized_version_level": None,
    }
    assert doc["gateways"] == [
        {
            "id": "gw-1",
            "listener": "gw-1:9092",
            "upstream": "broker-gw-1:9093",
            "broker_software_name": "Apache Kafka",
            "broker_software_version": "3.9",
            "gateway_version": "0.1.0",
            "metrics_url": None,
            "features": {"group.version": {"min_version": 0, "max_version": 1}},
        }
    ]


# -- update plans ------------------------------------------------------------------------

GATEWAYS = {
    "gw-1": {"group.version": (0, 1), "transaction.version": (0, 2)},
    "gw-2": {"group.version": (0, 1), "transaction.version": (0, 1)},
}


def test_feature_updates_map_commands_to_upgrade_types() -> None:
    assert [u.upgrade_type for u in feature_updates("finalize", [("a", 1)])] == [
        UpgradeType.UPGRADE
    ]
    assert [u.upgrade_type for u in feature_updates("downgrade", [("a", 1)])] == [
        UpgradeType.SAFE_DOWNGRADE
    ]
    assert [u.upgrade_type for u in feature_updates("downgrade", [("a", 1)], unsafe=True)] == [
        UpgradeType.UNSAFE_DOWNGRADE
    ]
    disable = feature_updates("disable", [("a", 5)])
    assert [(u.level, u.upgrade_type) for u in disable] == [(0, UpgradeType.SAFE_DOWNGRADE)]


def test_finalize_success_prints_each_change_and_old_to_new_epoch() -> None:
    plan = plan_updates(
        "finalize", Finalized({}, 3), GATEWAYS, feature_updates("finalize", [("group.version", 1)])
    )
    assert outcome_lines(Outcome(plan, new_epoch=4)) == (
        ["group.version: 0 → 1", "epoch: 3 → 4"],
        [],
    )


def test_first_finalize_shows_the_missing_epoch_as_dash() -> None:
    plan = plan_updates(
        "finalize", Finalized(), GATEWAYS, feature_updates("finalize", [("group.version", 1)])
    )
    assert outcome_lines(Outcome(plan, new_epoch=0))[0][-1] == "epoch: - → 0"


def test_dry_run_prints_the_changes_and_says_nothing_was_written() -> None:
    plan = plan_updates(
        "disable",
        Finalized({"group.version": 1}, 5),
        GATEWAYS,
        feature_updates("disable", [("group.version", 0)]),
    )
    out, err = outcome_lines(Outcome(plan, dry_run=True))
    assert out == ["group.version: 1 → 0", "epoch: 5", "(dry run: nothing written)"]
    assert err == []


def test_rejection_names_blocking_gateways_and_writes_nothing() -> None:
    plan = plan_updates(
        "finalize",
        Finalized({}, 1),
        GATEWAYS,
        feature_updates("finalize", [("group.version", 1), ("transaction.version", 2)]),
    )
    assert not plan.ok and plan.changes == []
    out, err = outcome_lines(Outcome(plan))
    assert out == []
    assert err[0].startswith("error: transaction.version: ")
    assert "gw-2 (supports 0-1)" in err[0]
    assert err[1] == "nothing written: featurectl applies every update or none"
    doc = outcome_document(Outcome(plan))
    assert doc["ok"] is False
    assert doc["errors"] == [
        {
            "feature": "transaction.version",
            "error_code": 42,
            "message": plan.errors[0].message,
            "blocking_gateways": ["gw-2"],
        }
    ]


def test_conflict_message_shows_expected_and_actual_epoch() -> None:
    plan = plan_updates(
        "finalize", Finalized({}, 3), GATEWAYS, feature_updates("finalize", [("group.version", 1)])
    )
    outcome = Outcome(plan, conflict=EpochConflict(3, 4))
    assert outcome_lines(outcome) == (
        [],
        ["conflict: finalized features changed concurrently (epoch 3 → 4); re-run"],
    )
    doc = outcome_document(outcome)
    assert (doc["ok"], doc["new_epoch"]) == (False, None)
    assert doc["conflict"] == {"expected_epoch": 3, "actual_epoch": 4}


def test_outcome_document_of_a_write() -> None:
    plan = plan_updates(
        "downgrade",
        Finalized({"transaction.version": 2}, 8),
        GATEWAYS,
        feature_updates("downgrade", [("transaction.version", 1)]),
    )
    assert outcome_document(Outcome(plan, new_epoch=9)) == {
        "command": "downgrade",
        "ok": True,
        "dry_run": False,
        "old_epoch": 8,
        "new_epoch": 9,
        "changes": [{"feature": "transaction.version", "from": 2, "to": 1}],
        "errors": [],
        "conflict": None,
    }


# -- command line (refused before connecting) -------------------------------------------


@pytest.fixture(autouse=True)
def _no_zookeeper_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ZOOKEEPER_ENV, raising=False)
    monkeypatch.delenv(ZOOKEEPER_AUTH_ENV, raising=False)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["finalize", "--feature", "group.version"], "expected NAME=LEVEL"),
        (["finalize", "--feature", "=1"], "expected NAME=LEVEL"),
        (["finalize", "--feature", "group.version=one"], "must be an integer"),
        (["downgrade", "--feature", "group.version=-1"], "must be >= 0"),
        (["disable", "--feature", "group.version=0"], "without a level"),
        (["finalize", "--feature", "g=1", "--timeout", "0"], "seconds > 0"),
        (["finalize", "--feature", "g=1", "--zookeeper-auth", "nopassword"], "USER:PASSWORD"),
    ],
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--zookeeper", "127.0.0.1:2181"])
    assert exc.value.code == cli.EXIT_USAGE
    assert message in capsys.readouterr().err


def test_zookeeper_is_required_without_the_environment_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["describe"])
    assert exc.value.code == cli.EXIT_USAGE
    assert "--zookeeper is required (or set KAFKA_GATEWAY_ZOOKEEPER)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (["downgrade", "--feature", "group.version=0"], DOWNGRADE_REFUSED),
        (["downgrade", "--feature", "group.version=1", "--unsafe"], DOWNGRADE_REFUSED),
        (["disable", "--feature", "group.version"], DISABLE_REFUSED),
    ],
)
def test_downgrades_need_allow_downgrade(
    argv: list[str], refusal: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Refused before connecting: nothing listens on port 1.
    assert cli.main([*argv, "--zookeeper", "127.0.0.1:1"]) == cli.EXIT_REJECTED
    err = capsys.readouterr().err
    assert err == f"error: {refusal}\n"
    assert "pass --allow-downgrade to confirm" in err


@pytest.mark.parametrize("command", ["describe", "finalize", "downgrade", "disable"])
def test_help_teaches_examples_output_and_exit_codes(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert f"featurectl {command} --" in text  # an example
    for section in ("examples:", "json (--output json)", "exit codes:", "--zookeeper"):
        assert section in text


# -- issue 31 item 5: options before the command word, --version, typos, | head -----------


def test_zookeeper_options_are_taken_before_the_command_word_and_after_wins() -> None:
    parse = cli.build_parser().parse_args
    before = parse(["--zookeeper", "a:1", "--chroot", "/x", "--zookeeper-tls", "describe"])
    assert (before.zookeeper, before.chroot, before.zookeeper_tls) == ("a:1", "/x", True)
    both = parse(["--zookeeper", "a:1", "--chroot", "/x", "finalize", "--zookeeper", "b:1",
                  "--feature", "group.version=1"])  # fmt: skip
    assert (both.zookeeper, both.chroot) == ("b:1", "/x")
    neither = parse(["describe"])
    assert (neither.chroot, neither.timeout, neither.zookeeper_tls_check_hostname) == (
        "/kafka-gateway",
        DEFAULT_TIMEOUT_S,
        True,
    )
    # collect and plan keep their own --zookeeper/--chroot; the top-level ones reach them.
    collect = parse(["--zookeeper", "a:1", "--chroot", "/x", "collect", "--out", "d"])
    assert (collect.zookeeper, collect.chroot) == ("a:1", "/x")
    plan = parse(["--chroot", "/x", "plan", "--metrics", "m", "--out", "o", "--chroot", "/y"])
    assert plan.chroot == "/y"


def test_feature_dependencies_of_a_misspelt_feature_suggests_the_known_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["feature-dependencies", "--feature", "group.verison=1", "--feature", "nope=1"]
    assert cli.main(argv) == cli.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        "error: unknown feature group.verison (did you mean group.version?), nope; "
        "known features: eligible.leader.replicas.version, group.version, "
    )


def _tool(module: str) -> list[str]:
    return [sys.executable, "-m", module]


@pytest.mark.parametrize(("module", "name"), [("featurectl", "featurectl"),
                                              ("gateway", "kafka-gateway")])  # fmt: skip
def test_version_prints_the_tool_and_its_version(module: str, name: str) -> None:
    done = subprocess.run([*_tool(module), "--version"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{name} {__version__}\n", "")


@pytest.mark.parametrize(
    "argv",
    [
        ["featurectl", "version-mapping"],
        ["featurectl", "feature-dependencies", "--feature", "metadata.version=27"],
        ["featurectl", "--help"],
        ["featurectl", "describe", "--help"],
        ["gateway", "--help"],
        ["gateway", "--version"],
    ],
)
def test_a_reader_that_went_away_ends_the_tool_without_a_traceback(argv: list[str]) -> None:
    """stdout is a pipe whose read end is already closed, so the first write fails (as
    after ``| head -1`` exits): no traceback, and 141 (SIGPIPE's) or 0 for argparse's
    own output, which argparse itself writes ignoring the error."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([*_tool(argv[0]), *argv[1:]], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60)  # fmt: skip
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.stderr == ""
    assert done.returncode in (0, EXIT_SIGPIPE)
    if argv[1] == "version-mapping":
        assert done.returncode == EXIT_SIGPIPE


def test_version_mapping_piped_to_head_prints_one_line_and_no_traceback() -> None:
    """The pipelines of the issue, through bash. ``head -1`` reads the whole (one-write)
    output before it exits, so featurectl ends 0; ``head -n 0`` exits without reading,
    so featurectl's write finds no reader: 141, which ``set -o pipefail`` reports as it
    does for coreutils (``yes | head -n 0``)."""
    featurectl = shlex.join(_tool("featurectl"))
    script = (
        f"set -o pipefail; {featurectl} version-mapping | head -1; echo rc=$?; "
        f"{featurectl} version-mapping | head -n 0; echo rc=$?"
    )
    # Buffered, as Python's stdout is when it is a pipe: unbuffered (PYTHONUNBUFFERED, set
    # on some CI machines) each line is a write of its own, and ``head -1`` may close the
    # pipe before the second, making 141 the right answer there too, as for coreutils.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.stdout.splitlines() == ["eligible.leader.replicas.version=1", "rc=0",
                                        f"rc={EXIT_SIGPIPE}"]  # fmt: skip
    assert done.stderr == ""
