"""Re-running a featurectl change that is already in place is a no-op with exit 0 (a
plan's commands are re-runnable as printed), and --release-version says why a feature
is skipped in describe's own words."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from featurectl import cli
from featurectl.commands import update as update_command
from featurectl.releases import release_table, release_updates
from gateway.features.znode import Finalized


class FakeStore:
    def __init__(self, levels: dict[str, int], epoch: int, supported: dict[str, Any]) -> None:
        self.finalized = Finalized(levels, epoch)
        self.supported = supported
        self.writes: list[dict[str, int]] = []

    def read(self) -> Finalized:
        return self.finalized

    def supported_by_gateway(self) -> dict[str, Any]:
        return self.supported

    def write(self, target: dict[str, int], **_: Any) -> int:
        self.writes.append(dict(target))
        self.finalized = Finalized(dict(target), self.finalized.epoch + 1)
        return self.finalized.epoch


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> FakeStore:
    fake = FakeStore(
        {"group.version": 1},
        4,
        {"gw-a": {"group.version": (0, 1), "transaction.version": (0, 2)}},
    )

    @contextmanager
    def feature_store(_args: Any) -> Iterator[FakeStore]:
        yield fake

    monkeypatch.setattr(update_command, "feature_store", feature_store)
    monkeypatch.setattr(update_command, "configure_logging", lambda *a: None)
    return fake


ZK = ["--zookeeper", "zk-0:2181"]


def test_upgrade_to_the_current_level_says_so_and_exits_0(
    store: FakeStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["upgrade", *ZK, "--feature", "group.version=1"]) == 0
    assert capsys.readouterr().out == "group.version: already at level 1 (nothing to change)\n"
    assert cli.main(["finalize", *ZK, "--feature", "group.version=1", "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["ok"], doc["changes"], doc["old_epoch"]) == (True, [], 4)
    assert store.writes == []


def test_downgrade_to_the_current_level_and_disable_of_a_disabled_feature_exit_0(
    store: FakeStore, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["downgrade", *ZK, "--feature", "group.version=1", "--allow-downgrade"]
    assert cli.main(argv) == 0
    assert "already at level 1" in capsys.readouterr().out
    argv = ["disable", *ZK, "--feature", "transaction.version", "--allow-downgrade"]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == "transaction.version: not finalized (nothing to change)\n"
    assert store.writes == []


def test_a_step_run_twice_changes_once_then_is_a_no_op(
    store: FakeStore, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["disable", *ZK, "--feature", "group.version", "--allow-downgrade"]
    assert cli.main(argv) == 0
    assert "group.version: 1 → 0" in capsys.readouterr().out
    assert cli.main(argv) == 0
    assert "not finalized (nothing to change)" in capsys.readouterr().out
    assert store.writes == [{}]


def test_a_no_op_beside_a_change_is_noted_and_the_change_is_written(
    store: FakeStore, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["upgrade", *ZK, "--feature", "group.version=1", "--feature", "transaction.version=2"]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert "transaction.version: 0 → 2" in out
    assert "note: group.version: already at level 1 (nothing to change)" in err
    assert store.writes == [{"group.version": 1, "transaction.version": 2}]


def test_release_version_names_what_describe_shows_for_a_feature_it_skips() -> None:
    levels = release_table().levels("4.1")
    _, notes = release_updates(
        levels,
        {"transaction.version"},
        {},
        "finalize",
        {"group.version": 0, "transaction.version": 2},
    )
    assert (
        "group.version=1 skipped: the live gateways support group.version up to level 0 only "
        "(describe: SupportedMaxVersion 0; the brokers behind them lack the API versions it "
        "gates)"
    ) in notes
    assert "kraft.version=1 skipped: no live gateway lists kraft.version" in notes
