"""kafka-features.sh parity: Apache Kafka's own FeatureCommand against real gateways.

Each gateway has a ZooKeeper chroot of its own (the session's ZooKeeper), allows
UpdateFeatures from loopback, and sits in front of the session's real Apache Kafka.
The same operation runs as Kafka 4.4's ``FeatureCommand`` (what ``kafka-features.sh``
runs) through one gateway and as ``featurectl --bootstrap-server`` through a twin
gateway started from the same levels; the outcomes must agree: exit code, the levels
and epoch in ZooKeeper afterwards, and the class of message (what was or can be set,
or the gateway's refusal text, which both tools print). Where the two differ on
purpose (featurectl's --allow-downgrade, --release-version skipping what no gateway
serves), the test asserts the documented difference instead. version-mapping and
feature-dependencies need no gateway: test_kafka_features_mapping.py.

Comparisons are "FeatureCommand's outcome == featurectl's outcome through the same
kind of gateway", which holds however the gateway merges its upstream broker's own
features into ApiVersions. Where describe's numbers depend on that merge (issue 30
deliverable 2, gateway/features/report.py: broker-only features as the broker reports
them, shared ones at the lower level, epoch = znode version + broker epoch + 1), the
expectation is computed from FeatureCommand's answer straight from Kafka (read-only and
--dry-run only there: the broker is the session's).
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from featurectl.cli import DOWNGRADE_REFUSED
from gateway.features.catalogue import load_catalogue
from gateway.features.store import FeatureStore, make_client
from gateway.features.znode import Finalized
from gateway.kafka_tools import tool_command
from gateway.server.apache_kafka import KRAFT_VERSION
from tests.conftest import GatewayFactory
from tests.harness import GatewayProcess, ZooKeeperProcess
from tests.harness.apache_kafka import ApacheKafkaBroker
from tests.integration.test_featurectl import RUN_TIMEOUT_S, featurectl
from tests.integration.test_featurectl_protocol import ALLOW_LOCALHOST
from tests.integration.test_features import wait_for

#: Every test runs kafka-features.sh of this release, whatever broker the session runs.
TOOL_VERSION = KRAFT_VERSION
METADATA = "metadata.version"
ELR = "eligible.leader.replicas.version"
TV = "transaction.version"
#: Every side's gateway has this id (each in its own chroot), so that refusals naming the
#: gateway read the same on both sides.
GATEWAY_ID = "gw"


def kafka_features(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``kafka-features.sh --bootstrap-server BOOTSTRAP ARGS`` (FeatureCommand, Kafka 4.4)."""
    command = tool_command("kafka-features", ["--bootstrap-server", bootstrap, *args], TOOL_VERSION)
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


# -- reading the two tools' output ------------------------------------------------------

_DESCRIBED = re.compile(
    r"^Feature: (?P<feature>\S+) +SupportedMinVersion: (?P<low>.+?) +SupportedMaxVersion: "
    r"(?P<high>.+?) +FinalizedVersionLevel: (?P<level>.+?) +Epoch: (?P<epoch>\S+)$"
)
_TOOL_DONE = re.compile(
    r"^(?P<feature>\S+) (?:was|can be) (?:(?:up|down)graded to (?P<level>\d+)|disabled)\.$"
)
_TOOL_FAILED = re.compile(r"^(?:Could|Can) not (?:disable \S+|(?:up|down)grade \S+ to \d+)\. (.*)$")
_CTL_CHANGE = re.compile(r"^(?!epoch:)(?P<feature>\S+): \d+ → (?P<level>\d+)$")
_CTL_ERROR = re.compile(r"^error: (?:[\w.]+: )?(.*)$")


def described(result: subprocess.CompletedProcess[str]) -> dict[str, tuple[str, ...]]:
    """kafka-features.sh describe lines as feature -> (min, max, finalized, epoch)."""
    assert result.returncode == 0, result
    rows = {}
    for line in result.stdout.splitlines():
        match = _DESCRIBED.match(line)
        assert match, f"not a kafka-features.sh describe line: {line!r}"
        rows[match["feature"]] = match.group("low", "high", "level", "epoch")
    return rows


def without_epoch(rows: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    return {feature: fields[:3] for feature, fields in rows.items()}


def epoch_of(rows: Mapping[str, tuple[str, ...]]) -> int:
    (epoch,) = {fields[3] for fields in rows.values()}
    return -1 if epoch == "-" else int(epoch)


def version_mapping(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """``name=level`` lines, either tool's (Kafka adds ``(4.0-IV3)`` to metadata.version)."""
    assert result.returncode == 0, result
    pairs = (re.sub(r" \(.*\)$", "", line).split("=") for line in result.stdout.splitlines())
    return {name: int(level) for name, level in pairs}


@dataclass(frozen=True)
class Verdict:
    """What a tool said about an update: ok or not, the levels it says were (or can be)
    set, and the refusal texts it printed (the gateway's, in both tools)."""

    ok: bool
    levels: frozenset[tuple[str, int]]
    messages: frozenset[str]


def tool_verdict(result: subprocess.CompletedProcess[str]) -> Verdict:
    levels, messages = set(), set()
    for line in result.stdout.splitlines():
        if done := _TOOL_DONE.match(line):
            levels.add((done["feature"], int(done["level"] or 0)))
        elif failed := _TOOL_FAILED.match(line):
            messages.add(failed[1])
    if result.returncode != 0 and not messages:
        messages.add(result.stderr.strip())  # refused before a request was sent
    return Verdict(result.returncode == 0, frozenset(levels), frozenset(messages))


def featurectl_verdict(result: subprocess.CompletedProcess[str]) -> Verdict:
    levels = {(m["feature"], int(m["level"])) for m in map(_CTL_CHANGE.match,
              result.stdout.splitlines()) if m}  # fmt: skip
    messages = {m[1] for m in map(_CTL_ERROR.match, result.stderr.splitlines()) if m}
    return Verdict(result.returncode == 0, frozenset(levels), frozenset(messages))


# -- gateways ----------------------------------------------------------------------------


@dataclass
class Side:
    """One gateway, its own chroot in the shared ZooKeeper, and both tools aimed at it."""

    gateway: GatewayProcess
    store: FeatureStore
    zookeeper: str

    @property
    def bootstrap(self) -> str:
        return self.gateway.bootstrap

    def tool(self, *args: str) -> subprocess.CompletedProcess[str]:
        return kafka_features(self.bootstrap, *args)

    def featurectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return featurectl("--bootstrap-server", self.bootstrap, *args)

    def featurectl_zk(self, *args: str) -> subprocess.CompletedProcess[str]:
        chroot = self.store.paths.chroot
        return featurectl(*args, "--zookeeper", self.zookeeper, "--chroot", chroot)

    def read(self) -> Finalized:
        return self.store.read()


@pytest.fixture
def upstream(apache_kafka: ApacheKafkaBroker) -> ApacheKafkaBroker:
    """The session's Apache Kafka, when it is 4.x: the steps finalize transaction.version
    2, whose API versions (Produce v12+) a 3.x broker does not offer."""
    if apache_kafka.zookeeper_mode:
        pytest.skip(f"needs Kafka 4.x behind the gateway, the session runs {apache_kafka.version}")
    return apache_kafka


@pytest.fixture
def side(
    gateway_factory: GatewayFactory,
    shared_zookeeper: ZooKeeperProcess,
    upstream: ApacheKafkaBroker,
    tmp_path: Path,
) -> Iterator[Callable[..., Side]]:
    """``side(name, levels, config=ALLOW_LOCALHOST)``: a gateway on a fresh chroot whose
    finalized levels start as ``levels`` (the built-in catalogue, Kafka's feature names)."""
    client = make_client(shared_zookeeper.connect_string)
    client.start(timeout=15)

    def start(name: str, levels: Mapping[str, int] = {}, config: str = ALLOW_LOCALHOST) -> Side:
        store = FeatureStore(client, f"/kafka-features-tool-{uuid.uuid4().hex[:8]}")
        if levels:
            store.write(levels, expected_epoch=-1)
        path = tmp_path / f"{name}.toml"
        path.write_text(config)
        gateway = gateway_factory(
            "--zookeeper", shared_zookeeper.connect_string,
            "--zookeeper-chroot", store.paths.chroot,
            "--gateway-id", GATEWAY_ID, "--config", str(path),
            upstream=upstream.bootstrap, name=name,
        )  # fmt: skip
        wait_for(lambda: store.registrations(), what=f"{name}'s registration")
        return Side(gateway, store, shared_zookeeper.connect_string)

    try:
        yield start
    finally:
        client.stop()
        client.close()


def same_outcome(tool_side: Side, tool_args: tuple[str, ...], ctl_side: Side,
                 ctl_args: tuple[str, ...]) -> Verdict:  # fmt: skip
    """Run FeatureCommand on one side and featurectl on its twin; assert both answered
    alike and left the same levels and epoch; return the verdict."""
    tool, ctl = tool_side.tool(*tool_args), ctl_side.featurectl(*ctl_args)
    assert tool.returncode == ctl.returncode, (tool, ctl)
    verdict = tool_verdict(tool)
    assert verdict == featurectl_verdict(ctl), (tool, ctl)
    assert tool_side.read() == ctl_side.read()
    return verdict


# -- describe -----------------------------------------------------------------------------


def direct_bootstrap(kafka: ApacheKafkaBroker) -> str:
    """Kafka's own loopback listener (INTERNAL, advertised as itself), for FeatureCommand
    straight at the broker; its client listener advertises an unresolvable host."""
    return f"127.0.0.1:{kafka.node.internal_port}"


def test_describe_output_kafka_is_what_kafka_features_sh_prints(
    side: Callable[..., Side], upstream: ApacheKafkaBroker
) -> None:
    direct = described(kafka_features(direct_bootstrap(upstream), "describe"))
    a = side("gw-a", {ELR: 1, TV: 2})
    before = a.tool("describe")
    ours = a.featurectl("describe", "--output", "kafka")
    after = a.tool("describe")
    rows, ours_rows = described(before), described(ours)
    # The merged epoch follows Kafka's metadata offset, which moves on its own: bracketed.
    assert without_epoch(rows) == without_epoch(ours_rows) == without_epoch(described(after))
    assert epoch_of(rows) <= epoch_of(ours_rows) <= epoch_of(described(after))
    for feature in (ELR, TV, "group.version"):  # the lower of the gateway's and Kafka's
        expected = min(a.read().level(feature), int(direct[feature][2]))
        assert rows[feature][2] == str(expected), feature
    # Byte for byte, padding included: the lines differ at most in the epoch.
    epochless = [re.sub(r"Epoch: \S+$", "", line) for line in before.stdout.splitlines()]
    assert [re.sub(r"Epoch: \S+$", "", line) for line in ours.stdout.splitlines()] == epochless

    # The ZooKeeper path: the gateway's registration, the znode's levels and its version.
    zk_rows = described(a.featurectl_zk("describe", "--output", "kafka"))
    assert set(zk_rows) == set(rows) - {METADATA}
    for feature, (low, high, level, _) in zk_rows.items():
        assert (low, high, int(level)) == (*rows[feature][:2], a.read().level(feature))
    assert epoch_of(zk_rows) == a.read().epoch == 0


def test_the_gateway_answers_kafka_features_sh_as_kafka_does_but_for_its_levels(
    side: Callable[..., Side], upstream: ApacheKafkaBroker
) -> None:
    """FeatureCommand straight at Kafka and through a gateway: the same features,
    metadata.version as Kafka's; supported ranges capped by the gateway's catalogue;
    finalized levels no higher than the gateway's own (ZooKeeper); and Kafka (KRaft)
    takes an update to the current level as a no-op where the gateway (ZooKeeper-mode
    rules) refuses it."""
    direct = described(kafka_features(direct_bootstrap(upstream), "describe"))
    a = side("gw-a", {ELR: 1})
    through = described(a.tool("describe"))
    assert set(through) == set(direct)
    assert through[METADATA][:3] == direct[METADATA][:3]
    catalogue = load_catalogue()
    for feature, (low, high, level, _) in through.items():
        if feature == METADATA:
            continue
        capped = min(int(direct[feature][1]), catalogue[feature].max_level)
        assert (low, high) == (direct[feature][0], str(capped)), feature
        assert int(level) == min(a.read().level(feature), int(direct[feature][2])), feature

    # A feature Kafka has finalized, asked for at its current level (dry run only: the
    # broker is the session's): KRaft says it can be done, the gateway refuses.
    feature, (_, _, level, _) = next((f, r) for f, r in direct.items() if f != METADATA
                                     and r[2] != "0")  # fmt: skip
    same_level = ("upgrade", "--feature", f"{feature}={level}", "--dry-run")
    assert tool_verdict(kafka_features(direct_bootstrap(upstream), *same_level)).ok
    a.store.write({ELR: 1, feature: int(level)}, expected_epoch=0)
    wait_for(lambda: described(a.tool("describe"))[feature][2] == level, what="the new level")
    refused = tool_verdict(a.tool(*same_level))
    assert not refused.ok
    assert refused.messages == {
        f"Can not upgrade a finalized feature: '{feature}' from existing versionLevel:"
        f"{level} to the same value."
    }


# -- updates ---------------------------------------------------------------------------


def test_upgrade_and_dry_run_agree_with_featurectl(side: Callable[..., Side]) -> None:
    a, b = side("gw-a"), side("gw-b")

    def both(*args: str) -> Verdict:
        return same_outcome(a, ("upgrade", *args), b, ("upgrade", *args))

    assert both("--feature", f"{ELR}=1", "--dry-run") == Verdict(True, frozenset({(ELR, 1)}),
                                                                  frozenset())  # fmt: skip
    assert a.read() == Finalized({}, -1)
    assert both("--feature", f"{ELR}=1").ok
    assert a.read() == Finalized({ELR: 1}, 0)
    assert both("--feature", f"{TV}=2", "--feature", "group.version=1").levels == {
        (TV, 2),
        ("group.version", 1),
    }
    assert a.read() == Finalized({ELR: 1, TV: 2, "group.version": 1}, 1)

    # The same level: the tool relays the gateway's ZooKeeper-mode refusal; featurectl,
    # on purpose (issue 31: a step run twice is a no-op), says it is already there, exit 0.
    same = ("upgrade", "--feature", f"{ELR}=1", "--dry-run")
    refused = tool_verdict(a.tool(*same))
    assert not refused.ok and "to the same value" in next(iter(refused.messages))
    again = b.featurectl(*same)
    assert again.returncode == 0, again
    assert again.stdout == f"{ELR}: already at level 1 (nothing to change)\n"
    # Refusals: a level no gateway serves and an upgrade to a lower level: each with
    # the gateway's own text, nothing written.
    for args, text in [
        (f"{ELR}=2", f"{GATEWAY_ID} (supports 0-1)"),
        (f"{TV}=1", "without setting the downgrade flag"),
    ]:
        refused = both("--feature", args, "--dry-run")
        assert not refused.ok and len(refused.messages) == 1, args
        assert text in next(iter(refused.messages)), args
    assert_unknown_name_is_featurectls_usage_error(a, b, "upgrade", "no.such.version=1")
    assert a.read() == Finalized({ELR: 1, TV: 2, "group.version": 1}, 1)


def assert_unknown_name_is_featurectls_usage_error(
    tool_side: Side, ctl_side: Side, command: str, feature: str
) -> None:
    """Where featurectl parts from the tool on purpose (issue 31): a feature name nothing
    knows. The tool sends it and relays the gateway's refusal (exit 1); featurectl
    refuses it itself as a usage error (exit 2), listing the known names, and sends
    nothing. Neither writes."""
    before = ctl_side.read()
    extra = ("--allow-downgrade",) if command != "upgrade" else ()
    tool = tool_verdict(tool_side.tool(command, "--feature", feature))
    assert not tool.ok, tool
    ctl = ctl_side.featurectl(command, "--feature", feature, *extra)
    name = feature.partition("=")[0]
    assert ctl.returncode == 2, ctl
    assert ctl.stderr.startswith(f"error: unknown feature {name}; known features: "), ctl
    assert ctl_side.read() == before


def test_downgrade_and_disable_agree_with_featurectl_given_allow_downgrade(
    side: Callable[..., Side],
) -> None:
    """kafka-features.sh has no --allow-downgrade (the command word is the consent);
    featurectl asks for it, and with it answers as the tool does."""
    a, b = side("gw-a", {TV: 2, ELR: 1}), side("gw-b", {TV: 2, ELR: 1})

    def both(command: str, *args: str) -> Verdict:
        return same_outcome(a, (command, *args), b, (command, *args, "--allow-downgrade"))

    refused = b.featurectl("downgrade", "--feature", f"{TV}=1")
    assert (refused.returncode, refused.stderr) == (1, f"error: {DOWNGRADE_REFUSED}\n")
    assert b.read() == Finalized({TV: 2, ELR: 1}, 0)

    assert both("downgrade", "--feature", f"{TV}=1", "--dry-run").levels == {(TV, 1)}
    assert a.read() == Finalized({TV: 2, ELR: 1}, 0)
    assert both("downgrade", "--feature", f"{TV}=1").ok
    assert a.read() == Finalized({TV: 1, ELR: 1}, 1)
    # "Down" to a higher level: both refuse. The same level: the tool refuses, featurectl
    # on purpose (issue 31: a step run twice is a no-op) says so and exits 0.
    assert not both("downgrade", "--feature", f"{TV}=2", "--dry-run").ok
    same = ("downgrade", "--feature", f"{TV}=1", "--dry-run")
    assert not tool_verdict(a.tool(*same)).ok
    again = b.featurectl(*same, "--allow-downgrade")
    assert again.returncode == 0, again
    assert again.stdout == f"{TV}: already at level 1 (nothing to change)\n"
    assert both("downgrade", "--feature", f"{TV}=0", "--unsafe", "--dry-run").ok

    assert both("disable", "--feature", ELR, "--dry-run").levels == {(ELR, 0)}
    assert both("disable", "--feature", ELR).ok
    assert a.read() == Finalized({TV: 1}, 2)
    assert_unknown_name_is_featurectls_usage_error(a, b, "disable", "no.such.version")
    assert a.read() == Finalized({TV: 1}, 2)


def test_an_upgrade_above_the_brokers_level_is_refused_so_describe_never_lags_the_tool(
    side: Callable[..., Side], upstream: ApacheKafkaBroker
) -> None:
    """What a kafka-features.sh user relies on: after "X was upgraded to N.", describe says
    N. Clients get the lower of the gateways' and the broker's level, so an upgrade the
    gateways could serve above the level Kafka has finalized is refused, naming the
    brokers as the place to go first, and nothing is written."""
    direct = described(kafka_features(direct_bootstrap(upstream), "describe"))
    a = side("gw-a")
    through = described(a.tool("describe"))
    above = [f for f, r in through.items() if f != METADATA and int(r[1]) > int(direct[f][2])]
    if not above:
        pytest.skip("Kafka has finalized every feature at the gateway's highest level")
    feature, level = above[0], int(through[above[0]][1])
    done = tool_verdict(a.tool("upgrade", "--feature", f"{feature}={level}"))
    assert not done.ok and not done.levels
    [message] = done.messages
    assert "upgrade the brokers first" in message
    assert f"kafka-features.sh --bootstrap-server BROKER upgrade --feature {feature}={level}" in (
        message
    )
    assert a.read() == Finalized({}, -1)
    assert described(a.tool("describe"))[feature][:3] == through[feature][:3]  # epoch moves


def test_upgrade_to_level_zero_is_refused_by_both_before_or_by_the_gateway(
    side: Callable[..., Side],
) -> None:
    """``upgrade --feature X=0``: Kafka's Admin client refuses it before sending; featurectl
    sends it and the gateway refuses it. Exit 1 and nothing written either way."""
    a = side("gw-a", {ELR: 1})
    tool, ctl = a.tool("upgrade", "--feature", f"{ELR}=0"), a.featurectl("upgrade", "--feature",
                                                                         f"{ELR}=0")  # fmt: skip
    assert (tool.returncode, ctl.returncode) == (1, 1)
    assert "should be set to SAFE_DOWNGRADE or UNSAFE_DOWNGRADE" in tool.stderr
    assert "allowDowngrade flag is false" in ctl.stderr
    assert a.read() == Finalized({ELR: 1}, 0)


def test_release_version_is_all_or_nothing_in_kafka_features_sh_and_skips_in_featurectl(
    side: Callable[..., Side], upstream: ApacheKafkaBroker
) -> None:
    """``upgrade|downgrade --release-version`` sends every feature of that release,
    metadata.version included, which no gateway lets a client update: the tool fails and
    nothing is written.
    featurectl skips what the gateways do not serve (a note on stderr) and sets the rest to
    the levels the tool's own version-mapping gives, unless the brokers have a feature
    below the release's level (kraft.version 0 on a static quorum): then the gateway
    refuses the whole update, names the brokers as the place to go first, and nothing is
    written."""
    a, b = side("gw-a"), side("gw-b")
    tool = a.tool("upgrade", "--release-version", "4.0")
    assert tool.returncode == 1
    assert tool.stdout.startswith("Could not upgrade ") and "metadata.version to 25." in tool.stdout
    assert a.read() == Finalized({}, -1)
    tool = a.tool("downgrade", "--release-version", "3.9")
    assert tool.returncode == 1
    assert "Could not downgrade metadata.version to 21." in tool.stdout
    assert a.read() == Finalized({}, -1)

    ctl = b.featurectl("upgrade", "--release-version", "4.0")
    assert any(line.startswith("note: metadata.version") for line in ctl.stderr.splitlines())
    mapping = version_mapping(kafka_features(b.bootstrap, "version-mapping", "--release-version",
                                             "4.0"))  # fmt: skip
    expected = {f: level for f, level in mapping.items() if level and f != METADATA}
    broker = described(kafka_features(direct_bootstrap(upstream), "describe"))
    behind = {f for f, level in expected.items() if int(broker[f][2]) < level}
    if behind:
        assert ctl.returncode == 1, ctl
        assert "upgrade the brokers first" in ctl.stderr
        assert all(f in ctl.stderr for f in behind), (behind, ctl.stderr)
        assert b.read() == Finalized({}, -1)
    else:
        assert ctl.returncode == 0, ctl
        assert b.read() == Finalized(expected, 0)


def test_featurectl_downgrade_to_a_release_skips_metadata_version(
    side: Callable[..., Side],
) -> None:
    """docs/features.md's promise for --release-version: features no gateway serves
    (metadata.version) are skipped with a note, the rest move to the release's levels."""
    b = side("gw-b", {TV: 2})
    ctl = b.featurectl("downgrade", "--release-version", "3.9", "--allow-downgrade")
    assert ctl.returncode == 0, ctl
    assert b.read() == Finalized({}, 1)  # 3.9 has no transaction.version


def test_a_client_the_gateway_does_not_allow_gets_the_same_refusal(
    side: Callable[..., Side],
) -> None:
    a = side("gw-a", config='[features]\nupdate_allowed_from = ["192.0.2.0/24"]\n')
    verdict = same_outcome(a, ("upgrade", "--feature", f"{ELR}=1"),
                           a, ("upgrade", "--feature", f"{ELR}=1"))  # fmt: skip
    assert verdict.messages == {
        "UpdateFeatures through kafka-gateway is refused: client address is not in "
        "features.update_allowed_from; use featurectl"
    }
    assert a.read() == Finalized({}, -1)
