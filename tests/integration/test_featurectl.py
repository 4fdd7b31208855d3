"""featurectl describe | finalize | downgrade | disable against a real ZooKeeper.

featurectl runs as a subprocess (what an operator runs, exit codes included). Live
gateways are simulated by ephemeral registrations made with this test's own kazoo
session (``FeatureStore.register``), exactly the znodes a gateway writes; each test
works under its own chroot of the session ZooKeeper.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kazoo.client import KazooClient

from featurectl.features import feature_updates, plan_updates
from gateway.commands import EXIT_SIGPIPE
from gateway.features.store import EpochConflict, FeatureStore, make_client
from gateway.features.znode import NO_EPOCH, Finalized, Registration, encode_registration
from tests.harness import ZooKeeperProcess, free_port

# Each featurectl run should take well under a second; this only stops a hung one.
RUN_TIMEOUT_S = 60


@dataclass
class Cluster:
    """A chroot on the shared ZooKeeper with gateways registered by this test."""

    connect: str
    chroot: str
    store: FeatureStore
    # The session that holds every simulated gateway's ephemeral registration.
    gateway_store: FeatureStore

    def gateway(self, gateway_id: str, **features: tuple[int, int]) -> None:
        """Register a live gateway supporting ``features`` (``group_version=(0, 1)``)."""
        self.gateway_store.register(_registration(gateway_id, features))

    def gateways(self, count: int, **features: tuple[int, int]) -> None:
        """Register ``count`` gateways at once (pipelined, unlike ``register``)."""
        store = self.gateway_store
        store.client.ensure_path(store.paths.gateway_ids)
        pending = [
            store.client.create_async(
                store.paths.gateway(f"gw-{n:03d}"),
                encode_registration(_registration(f"gw-{n:03d}", features)),
                ephemeral=True,
            )
            for n in range(count)
        ]
        for result in pending:
            result.get(timeout=10)

    def finalized(self) -> Finalized:
        return self.store.read()

    def run(self, *args: str, auth: str | None = None) -> subprocess.CompletedProcess[str]:
        return featurectl(*args, "--zookeeper", self.connect, "--chroot", self.chroot, auth=auth)


def _registration(gateway_id: str, features: dict[str, tuple[int, int]]) -> Registration:
    return Registration(
        gateway_id=gateway_id,
        listener=f"{gateway_id}.example:9092",
        upstream=f"broker-{gateway_id}:9093",
        features={name.replace("_", "."): rng for name, rng in features.items()},
        broker_software_name="Apache Kafka",
        broker_software_version="3.9",
        gateway_version="0.1.0",
    )


def featurectl_env(auth: str | None = None) -> dict[str, str]:
    """This process's environment without a developer's KAFKA_GATEWAY_ZOOKEEPER*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_GATEWAY_ZOOKEEPER")}
    if auth is not None:
        env["KAFKA_GATEWAY_ZOOKEEPER_AUTH"] = auth
    return env


def featurectl(*args: str, auth: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "featurectl", *args],
        capture_output=True,
        text=True,
        env=featurectl_env(auth),
        timeout=RUN_TIMEOUT_S,
    )


def _client(zk: ZooKeeperProcess, auth: str | None = None) -> KazooClient:
    client = make_client(zk.connect_string, auth=auth)
    client.start(timeout=10)
    return client


@pytest.fixture
def cluster(shared_zookeeper: ZooKeeperProcess) -> Iterator[Cluster]:
    chroot = f"/featurectl-{uuid.uuid4().hex[:12]}"
    # One session holds every simulated gateway; stopping it expires the registrations.
    gateways = _client(shared_zookeeper)
    reader = _client(shared_zookeeper)
    try:
        yield Cluster(
            shared_zookeeper.connect_string,
            chroot,
            FeatureStore(reader, chroot),
            FeatureStore(gateways, chroot),
        )
    finally:
        gateways.stop()
        gateways.close()
        reader.stop()
        reader.close()


def assert_ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"rc={result.returncode}\n{result.stdout}\n{result.stderr}"


# -- describe ----------------------------------------------------------------------------


def test_describe_table_shows_supported_finalized_limited_by_and_gateways(
    cluster: Cluster,
) -> None:
    cluster.gateway("gw-a", group_version=(0, 1), transaction_version=(0, 2))
    cluster.gateway("gw-b", group_version=(0, 1), transaction_version=(0, 1))
    assert_ok(cluster.run("finalize", "--feature", "group.version=1"))

    result = cluster.run("describe")

    assert_ok(result)
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line}
    assert rows["Feature"] == [
        "Feature",
        "SupportedMinVersion",
        "SupportedMaxVersion",
        "FinalizedVersionLevel",
        "Epoch",
        "LimitedBy",
    ]
    assert rows["group.version"] == ["group.version", "0", "1", "1", "0", "-"]
    assert rows["transaction.version"] == ["transaction.version", "0", "1", "0", "0", "gw-b"]
    # Catalogue features no gateway registered: every gateway counts as supporting 0 only.
    assert rows["share.version"] == ["share.version", "0", "0", "0", "0", "-"]
    assert "Live gateways (2):" in result.stdout
    assert (
        " ".join(rows["gw-a"]) == "gw-a gw-a.example:9092 broker-gw-a:9093 Apache Kafka 3.9 0.1.0"
    )
    assert rows["gw-b"][:3] == ["gw-b", "gw-b.example:9092", "broker-gw-b:9093"]
    assert result.stderr == ""


def test_describe_json_is_one_document(cluster: Cluster) -> None:
    cluster.gateway("gw-a", group_version=(0, 1), transaction_version=(0, 2))
    cluster.gateway("gw-b", group_version=(0, 1), transaction_version=(0, 1))

    result = cluster.run("describe", "--feature", "transaction.version", "--output", "json")

    assert_ok(result)
    doc = json.loads(result.stdout)
    assert doc["epoch"] == NO_EPOCH
    assert doc["features"] == [
        {
            "feature": "transaction.version",
            "description": "KIP-890: transactions server-side defense",
            "supported_min_version": 0,
            "supported_max_version": 1,
            "finalized_version_level": 0,
            "limited_by": ["gw-b"],
            # These registrations carry no broker levels (a broker reporting no features).
            "broker_finalized_version_level": None,
        }
    ]
    assert [g["id"] for g in doc["gateways"]] == ["gw-a", "gw-b"]
    assert doc["gateways"][0]["features"]["transaction.version"] == {
        "min_version": 0,
        "max_version": 2,
    }


def test_describe_without_gateways_says_none_is_live(cluster: Cluster) -> None:
    result = cluster.run("describe", "--feature", "group.version")
    assert_ok(result)
    assert f"No live gateway is registered under {cluster.chroot}/gateways/ids." in result.stdout


def test_describe_of_an_unknown_feature_is_rejected(cluster: Cluster) -> None:
    result = cluster.run("describe", "--feature", "no.such.version")
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown feature no.such.version; known features: ")


@pytest.mark.parametrize(
    "args",
    [
        ("describe", "--feature", "group.verison"),
        ("finalize", "--feature", "group.verison=1"),
        ("upgrade", "--feature", "group.verison=1", "--dry-run"),
        ("downgrade", "--feature", "group.verison=0", "--allow-downgrade"),
        ("disable", "--feature", "group.verison", "--allow-downgrade"),
    ],
)
def test_a_misspelt_feature_is_a_usage_error_that_suggests_the_known_one(
    cluster: Cluster, args: tuple[str, ...]
) -> None:
    # A feature only this gateway and the finalized levels know counts as known too.
    cluster.gateway("gw-a", group_version=(0, 1), gateway_only_version=(0, 1))
    cluster.store.write({"group.version": 1}, expected_epoch=NO_EPOCH)
    result = cluster.run(*args)
    assert (result.returncode, result.stdout) == (2, ""), result
    error, known = result.stderr.removesuffix("\n").split("; known features: ")
    assert error == "error: unknown feature group.verison (did you mean group.version?)"
    assert {"group.version", "gateway.only.version", "transaction.version"} <= set(
        known.split(", ")
    )
    assert cluster.finalized() == Finalized({"group.version": 1}, 0)


def test_zookeeper_options_before_the_command_word(cluster: Cluster) -> None:
    """As --bootstrap-server: ``featurectl --zookeeper ZK --chroot C describe``; given on
    both sides, the one after the command word wins."""
    cluster.gateway("gw-a", group_version=(0, 1))
    where = ("--zookeeper", cluster.connect, "--chroot", cluster.chroot)
    before = featurectl(*where, "describe", "--output", "json")
    assert_ok(before)
    after = cluster.run("describe", "--output", "json")
    assert before.stdout == after.stdout
    assert [g["id"] for g in json.loads(before.stdout)["gateways"]] == ["gw-a"]
    unreachable = f"127.0.0.1:{free_port()}"
    wins = featurectl("--zookeeper", unreachable, "--chroot", "/elsewhere", "finalize",
                      "--feature", "group.version=1", *where)  # fmt: skip
    assert_ok(wins)
    assert cluster.finalized() == Finalized({"group.version": 1}, 0)


def test_describe_into_a_closed_pipe_ends_without_a_traceback(cluster: Cluster) -> None:
    """``featurectl describe ... | head -1`` where head has gone before featurectl writes."""
    cluster.gateway("gw-a", group_version=(0, 1))
    for output in ("table", "json", "kafka"):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "featurectl", "describe", "--output", output,
                 "--zookeeper", cluster.connect, "--chroot", cluster.chroot],
                stdout=write_end, stderr=subprocess.PIPE, text=True, env=featurectl_env(),
                timeout=RUN_TIMEOUT_S,
            )  # fmt: skip
        finally:
            os.close(write_end)
        assert (done.returncode, done.stderr) == (EXIT_SIGPIPE, ""), output


# -- finalize ----------------------------------------------------------------------------


def test_finalize_writes_levels_and_prints_old_to_new_epoch(cluster: Cluster) -> None:
    cluster.gateway("gw-a", group_version=(0, 1), transaction_version=(0, 2))
    cluster.gateway("gw-b", group_version=(0, 1), transaction_version=(0, 2))

    first = cluster.run("finalize", "--feature", "group.version=1")
    second = cluster.run("finalize", "--feature", "transaction.version=2", "--output", "json")

    assert_ok(first)
    assert first.stdout.splitlines() == ["group.version: 0 → 1", "epoch: - → 0"]
    assert_ok(second)
    doc = json.loads(second.stdout)
    assert (doc["ok"], doc["old_epoch"], doc["new_epoch"]) == (True, 0, 1)
    assert doc["changes"] == [{"feature": "transaction.version", "from": 0, "to": 2}]
    assert cluster.finalized() == Finalized({"group.version": 1, "transaction.version": 2}, 1)


def test_finalize_blocked_by_a_gateway_with_a_lower_max_names_it(cluster: Cluster) -> None:
    cluster.gateway("gw-new", transaction_version=(0, 2))
    cluster.gateway("gw-old", transaction_version=(0, 1))
    assert_ok(cluster.run("finalize", "--feature", "transaction.version=1"))
    before = cluster.finalized()

    result = cluster.run("finalize", "--feature", "transaction.version=2")
    as_json = cluster.run("finalize", "--feature", "transaction.version=2", "--output", "json")

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: transaction.version: ")
    assert "gw-old (supports 0-1)" in result.stderr
    assert "gw-new" not in result.stderr
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["errors"][0]["blocking_gateways"] == ["gw-old"]
    assert cluster.finalized() == before


def test_finalize_beyond_every_gateway_names_them_all(cluster: Cluster) -> None:
    cluster.gateway("gw-a", group_version=(0, 1))
    cluster.gateway("gw-b", group_version=(0, 1))

    result = cluster.run("finalize", "--feature", "group.version=2")

    assert result.returncode == 1
    assert "gw-a (supports 0-1), gw-b (supports 0-1)" in result.stderr
    assert cluster.finalized() == Finalized({}, NO_EPOCH)


def test_finalize_is_all_or_nothing(cluster: Cluster) -> None:
    cluster.gateway("gw-a", group_version=(0, 1), share_version=(0, 0))

    result = cluster.run("finalize", "--feature", "group.version=1", "--feature", "share.version=1")

    assert result.returncode == 1
    assert "nothing written: featurectl applies every update or none" in result.stderr
    assert cluster.finalized() == Finalized({}, NO_EPOCH)


def test_dry_run_writes_nothing(cluster: Cluster) -> None:
    cluster.gateway("gw-a", group_version=(0, 1), transaction_version=(0, 2))
    assert_ok(cluster.run("finalize", "--feature", "transaction.version=2"))
    before = cluster.finalized()

    finalize = cluster.run("finalize", "--feature", "group.version=1", "--dry-run")
    downgrade = cluster.run(
        "downgrade", "--feature", "transaction.version=1", "--allow-downgrade", "--dry-run"
    )

    assert_ok(finalize)
    assert finalize.stdout.splitlines() == [
        "group.version: 0 → 1",
        "epoch: 0",
        "(dry run: nothing written)",
    ]
    assert_ok(downgrade)
    assert "transaction.version: 2 → 1" in downgrade.stdout
    assert cluster.finalized() == before


# -- downgrade / disable -------------------------------------------------------------------


def test_downgrade_without_allow_downgrade_is_rejected_and_changes_nothing(
    cluster: Cluster,
) -> None:
    cluster.gateway("gw-a", transaction_version=(0, 2))
    assert_ok(cluster.run("finalize", "--feature", "transaction.version=2"))
    before = cluster.finalized()

    result = cluster.run("downgrade", "--feature", "transaction.version=1")

    assert result.returncode == 1
    assert "downgrading can make clients that use the newer API versions fail" in result.stderr
    assert "pass --allow-downgrade to confirm" in result.stderr
    assert cluster.finalized() == before


def test_downgrade_with_allow_downgrade_lowers_the_level(cluster: Cluster) -> None:
    cluster.gateway("gw-a", transaction_version=(0, 2))
    assert_ok(cluster.run("finalize", "--feature", "transaction.version=2"))

    result = cluster.run(
        "downgrade", "--feature", "transaction.version=1", "--allow-downgrade", "--unsafe"
    )

    assert_ok(result)
    assert result.stdout.splitlines() == ["transaction.version: 2 → 1", "epoch: 0 → 1"]
    assert cluster.finalized() == Finalized({"transaction.version": 1}, 1)


def test_downgrade_to_level_0_disables(cluster: Cluster) -> None:
    cluster.gateway("gw-a", transaction_version=(0, 2))
    assert_ok(cluster.run("finalize", "--feature", "transaction.version=2"))

    assert_ok(cluster.run("downgrade", "--feature", "transaction.version=0", "--allow-downgrade"))
    assert cluster.finalized() == Finalized({}, 1)


def test_disable_removes_the_finalized_level_only_when_confirmed(cluster: Cluster) -> None:
    cluster.gateway("gw-a", group_version=(0, 1), transaction_version=(0, 2))
    assert_ok(
        cluster.run(
            "finalize", "--feature", "group.version=1", "--feature", "transaction.version=2"
        )
    )

    refused = cluster.run("disable", "--feature", "group.version")
    assert refused.returncode == 1
    assert "pass --allow-downgrade to confirm" in refused.stderr
    assert cluster.finalized().level("group.version") == 1

    result = cluster.run("disable", "--feature", "group.version", "--allow-downgrade")
    assert_ok(result)
    assert result.stdout.splitlines() == ["group.version: 1 → 0", "epoch: 0 → 1"]
    assert cluster.finalized() == Finalized({"transaction.version": 2}, 1)

    # Run twice (a plan's step pasted again): a no-op, exit 0, nothing written.
    again = cluster.run("disable", "--feature", "group.version", "--allow-downgrade")
    assert_ok(again)
    assert again.stdout.splitlines() == ["group.version: not finalized (nothing to change)"]
    assert cluster.finalized() == Finalized({"transaction.version": 2}, 1)


# -- concurrency ---------------------------------------------------------------------------


def test_concurrent_writers_of_one_epoch_exactly_one_wins(
    cluster: Cluster, shared_zookeeper: ZooKeeperProcess
) -> None:
    """featurectl's read → validate → compare-and-set, with every writer held between
    read and write so that all of them race for the same epoch."""
    writers = 6
    cluster.gateway("gw-a", **{f"race{i}_version": (0, 1) for i in range(writers)})
    barrier = threading.Barrier(writers)
    results: list[int | EpochConflict] = [0] * writers
    clients = [_client(shared_zookeeper) for _ in range(writers)]

    def write(i: int) -> None:
        store = FeatureStore(clients[i], cluster.chroot)
        finalized = store.read()
        updates = feature_updates("finalize", [(f"race{i}.version", 1)])
        plan = plan_updates("finalize", finalized, store.supported_by_gateway(), updates)
        assert plan.ok
        barrier.wait(timeout=10)
        try:
            results[i] = store.write(plan.target, expected_epoch=finalized.epoch)
        except EpochConflict as conflict:
            results[i] = conflict

    try:
        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    finally:
        for client in clients:
            client.stop()
            client.close()

    winners = [i for i, r in enumerate(results) if not isinstance(r, EpochConflict)]
    assert len(winners) == 1, results
    conflicts = [r for r in results if isinstance(r, EpochConflict)]
    assert {(c.expected, c.actual) for c in conflicts} == {(NO_EPOCH, 0)}
    assert cluster.finalized() == Finalized({f"race{winners[0]}.version": 1}, 0)


_EPOCH = re.compile(r"^epoch: (\S+) → (\d+)$", re.M)
_CONFLICT = re.compile(
    r"conflict: finalized features changed concurrently \(epoch (-|\d+) → \d+\); re-run\n"
)


def test_parallel_finalize_processes_lose_no_update(cluster: Cluster) -> None:
    """featurectl processes started together: losers exit 1 with the conflict message
    and succeed when re-run; every winner's change survives, one winner per epoch."""
    writers = 5
    features = {f"race{i}_version": (0, 1) for i in range(writers)}
    # A fleet this size makes each featurectl spend a while between reading the epoch
    # and writing (one read per registration), so the processes really do overlap.
    cluster.gateways(150, **features)

    def finalize(i: int) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "featurectl", "finalize", "--feature", f"race{i}.version=1"]
        argv += ["--zookeeper", cluster.connect, "--chroot", cluster.chroot]
        return subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=featurectl_env()
        )

    new_epochs: list[int] = []

    def collect(i: int, proc: subprocess.Popen[str]) -> bool:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
        if proc.returncode == 0:
            match = _EPOCH.search(out)
            assert match, out
            new_epochs.append(int(match.group(2)))
            return True
        assert proc.returncode == 1, err
        assert _CONFLICT.fullmatch(err), err
        return False

    racing = {i: finalize(i) for i in range(writers)}
    losers = [i for i, proc in racing.items() if not collect(i, proc)]
    assert new_epochs, "every racer lost: nobody can have won their epoch"
    assert losers, "the racers never overlapped, so the test proved nothing"
    for i in losers:  # "re-run", as the message says
        assert collect(i, finalize(i))

    # One winner per epoch, the epochs a gap-free sequence, and nothing lost.
    assert sorted(new_epochs) == list(range(writers))
    assert cluster.finalized() == Finalized(
        {f"race{i}.version": 1 for i in range(writers)}, writers - 1
    )


# -- connection and security -----------------------------------------------------------------


def test_zookeeper_down_is_a_one_line_error_naming_the_connect_string() -> None:
    connect = f"127.0.0.1:{free_port()}"  # nothing listens there

    result = featurectl("describe", "--zookeeper", connect, "--timeout", "1")

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: cannot connect to ZooKeeper at {connect} within 1s")
    assert "Traceback" not in result.stderr


def test_feature_znode_created_with_digest_auth_refuses_unauthenticated_writes(
    cluster: Cluster,
) -> None:
    """Documented choice: "not authorized" is a refusal (exit 1), not a usage error."""
    cluster.gateway("gw-a", group_version=(0, 1), transaction_version=(0, 2))
    admin = "admin:s3cret"
    assert_ok(cluster.run("finalize", "--feature", "group.version=1", auth=admin))
    before = cluster.finalized()

    anonymous = cluster.run("finalize", "--feature", "transaction.version=1")
    wrong = cluster.run("finalize", "--feature", "transaction.version=1", auth="admin:guess")

    for result in (anonymous, wrong):
        assert result.returncode == 1
        assert result.stderr.startswith("error: not authorized: ")
        assert result.stderr.count("\n") == 1
    assert "pass --zookeeper-auth USER:PASSWORD" in anonymous.stderr
    assert cluster.finalized() == before
    # Everyone may still read; the right credentials may still write.
    assert_ok(cluster.run("describe", "--feature", "group.version"))
    assert_ok(cluster.run("finalize", "--feature", "transaction.version=1", auth=admin))
