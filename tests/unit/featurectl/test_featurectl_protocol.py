"""featurectl's Kafka-protocol path, the parts without a socket: arguments, the
--command-config file, the SCRAM exchange and the Kafka release table.

tests/integration/test_featurectl_protocol.py runs the same commands against real gateways.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from featurectl import cli
from featurectl.client_config import (
    ClientConfig,
    CommandConfigError,
    client_config,
    load_command_config,
    parse_jaas,
    read_properties,
)
from featurectl.features import Outcome, answered_plan, feature_updates, outcome_lines
from featurectl.kafka import KafkaClientError, ScramClient
from featurectl.releases import release_table, release_updates
from gateway.features.validation import UpdateResult
from gateway.features.znode import Finalized


def parsed(*argv: str) -> object:
    return cli.build_parser().parse_args(list(argv))


# -- arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--bootstrap-server", "gw-0:9092", "describe"],
        ["describe", "--bootstrap-server", "gw-0:9092"],
    ],
)
def test_bootstrap_server_is_taken_before_or_after_the_command_word(argv: list[str]) -> None:
    args = parsed(*argv)
    assert args.bootstrap_server == "gw-0:9092"  # type: ignore[attr-defined]
    assert args.command == "describe"  # type: ignore[attr-defined]


def test_command_config_is_taken_before_the_command_word_too() -> None:
    args = parsed("--command-config", "a.properties", "finalize", "--bootstrap-server", "h:1",
                  "--feature", "group.version=1")  # fmt: skip
    assert (args.command_config, args.bootstrap_server) == ("a.properties", "h:1")  # type: ignore[attr-defined]


def test_upgrade_is_finalize_and_metadata_is_release_version() -> None:
    args = parsed("upgrade", "--metadata", "4.0", "--bootstrap-server", "h:1")
    assert args.release_version == "4.0"  # type: ignore[attr-defined]
    assert args.handler is cli._update  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["describe"], "--zookeeper is required (or set KAFKA_GATEWAY_ZOOKEEPER), or "
         "--bootstrap-server HOST:PORT"),
        (["describe", "--bootstrap-server", "nohost"], "expected HOST:PORT"),
        (["describe", "--bootstrap-server", "h:1", "--zookeeper", "z:2181"], "not both"),
        (["describe", "--command-config", "x", "--zookeeper", "z:2181"],
         "needs --bootstrap-server"),
        (["upgrade", "--bootstrap-server", "h:1"],
         "--feature NAME=LEVEL (repeatable) or --release"),
        (["upgrade", "--bootstrap-server", "h:1", "--release-version", "4.0", "--feature", "g=1"],
         "--feature NAME=LEVEL (repeatable) or --release"),
        (["upgrade", "--bootstrap-server", "h:1", "--release-version", "2.8"],
         "unknown Apache Kafka release '2.8'"),
    ],
)  # fmt: skip
def test_connection_and_release_arguments_are_usage_errors(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KAFKA_GATEWAY_ZOOKEEPER", raising=False)
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == cli.EXIT_USAGE
    assert message in capsys.readouterr().err


def test_downgrade_through_a_gateway_needs_allow_downgrade_before_connecting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Nothing listens on port 1: the refusal comes first, as on the ZooKeeper path.
    argv = ["--bootstrap-server", "127.0.0.1:1", "disable", "--feature", "group.version"]
    assert cli.main(argv) == cli.EXIT_REJECTED
    assert capsys.readouterr().err == f"error: {cli.DISABLE_REFUSED}\n"


def test_help_lists_the_command_config_keys_and_what_zookeeper_checks_more() -> None:
    text = cli.build_parser()._subparsers._group_actions[0].choices["finalize"].format_help()  # type: ignore[union-attr]
    for key in ("security.protocol", "ssl.ca.location", "sasl.jaas.config"):
        assert key in text
    assert "The ZooKeeper path sees more: every live gateway's registration" in text


# -- --command-config --------------------------------------------------------------------


def test_properties_follow_java_rules_comments_separators_and_continuations() -> None:
    text = (
        "# admin client\n"
        "! also a comment\n"
        "security.protocol = SASL_SSL\n"
        "sasl.mechanism: SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="ops" password="s3cr=t";\n'
    )
    props = read_properties(text)
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert parse_jaas(props["sasl.jaas.config"]) == ("ops", "s3cr=t")


def test_command_config_file_gives_tls_and_sasl_settings(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    path = tmp_path / "admin.properties"
    path.write_text(
        f"security.protocol=SASL_SSL\nssl.ca.location={ca}\n"
        "sasl.mechanism=PLAIN\nsasl.username=admin\nsasl.password=pw\n"
        "ssl.endpoint.identification.algorithm=\nclient.id=ops\nlinger.ms=5\n"
    )
    config = load_command_config(str(path))
    assert config == ClientConfig(
        security_protocol="SASL_SSL",
        ssl_ca=str(ca),
        ssl_check_hostname=False,
        sasl_mechanism="PLAIN",
        sasl_username="admin",
        sasl_password="pw",
        unknown_keys=("linger.ms",),
    )
    assert config.tls and config.sasl


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"security.protocol": "SSH"}, "is not one of PLAINTEXT, SSL"),
        ({"ssl.truststore.location": "/x.jks"}, "needs ssl.truststore.type=PEM"),
        ({"ssl.keystore.location": "/x.jks"}, "ssl.keystore.* is not supported"),
        ({"security.protocol": "SASL_PLAINTEXT"}, "needs sasl.username and sasl.password"),
        ({"sasl.mechanism": "GSSAPI"}, "is not one of PLAIN, SCRAM-SHA-256"),
        ({"ssl.ca.location": "/no/such/ca.pem"}, "TLS file /no/such/ca.pem does not exist"),
    ],
)
def test_command_config_that_cannot_be_honoured_says_why(
    props: dict[str, str], message: str
) -> None:
    with pytest.raises(CommandConfigError) as exc:
        client_config(props)
    assert message in str(exc.value)


def test_unreadable_command_config_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["describe", "--bootstrap-server", "127.0.0.1:1", "--command-config", "/no/such"]
    assert cli.main(argv) == cli.EXIT_USAGE
    assert "cannot read --command-config /no/such" in capsys.readouterr().err


# -- SCRAM ------------------------------------------------------------------------------


def test_scram_sha_256_matches_the_rfc_7677_example() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert client.final(server_first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_scram_refuses_a_server_that_does_not_prove_the_password() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="abc")
    client.final(b"r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    with pytest.raises(KafkaClientError, match="signature does not match"):
        client.verify(b"v=AAAA")


# -- Kafka releases ---------------------------------------------------------------------


def test_release_table_gives_each_releases_levels_patch_releases_included() -> None:
    table = release_table()
    assert table.levels("4.0") == {
        "metadata.version": 25,
        "kraft.version": 1,
        "group.version": 1,
        "transaction.version": 2,
        # Not shipped yet in 4.0: level 0, as kafka-features.sh version-mapping prints.
        "eligible.leader.replicas.version": 0,
        "share.version": 0,
        "streams.version": 0,
    }
    assert table.levels("4.0.1") == table.levels("4.0") == table.levels("4.0-IV3")
    assert table.levels("3.9")["metadata.version"] == 21
    # Generated from Kafka's jars (scripts/kafka_protocol/features.py), which it names.
    assert "kafka-server-common" in table.source and "MetadataVersion" in table.source
    with pytest.raises(KeyError, match=r"known: 3\.3, 3\.4"):
        table.levels("5.x")


def test_release_table_gives_what_each_releases_brokers_support() -> None:
    table = release_table()
    # 3.3-3.8 have metadata.version only; KRaft's first level is 1 until 4.0 drops 3.0-3.2.
    assert table.supported("3.3") == {"metadata.version": (1, 7)}
    assert table.supported("3.9.2")["kraft.version"] == (0, 1)
    # 4.0 supports ELR level 1 but does not finalize it by default (levels: 0).
    supported = table.supported("4.0")
    assert supported["metadata.version"] == (7, 25)
    assert supported["eligible.leader.replicas.version"] == (0, 1)
    assert table.levels("4.0")["eligible.leader.replicas.version"] == 0
    # Every release's default levels are within what its brokers support.
    for release, levels in table.releases.items():
        for name, level in levels.items():
            low, high = table.supported(release)[name]
            assert low <= level <= high, (release, name)
    with pytest.raises(KeyError, match="unknown Apache Kafka release"):
        table.supported("2.8")


def test_release_updates_move_servable_features_in_the_commands_direction() -> None:
    levels = release_table().levels("4.0")
    known = {"group.version", "transaction.version"}
    current = {"transaction.version": 2}
    updates, notes = release_updates(levels, known, current, "finalize")
    assert updates == {"group.version": 1}
    assert "kraft.version=1 skipped: no live gateway supports kraft.version" in notes
    # 3.9 has no transaction.version: a downgrade to 3.9 disables it.
    updates, notes = release_updates(release_table().levels("3.9"), known, current, "downgrade")
    assert updates == {"transaction.version": 0}
    # An upgrade never lowers a level; it says so.
    updates, notes = release_updates(release_table().levels("3.9"), known, current, "finalize")
    assert updates == {}
    assert "transaction.version stays at 2 (the release has 0; use downgrade)" in notes


def test_version_mapping_and_feature_dependencies_print_kafkas_tables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["version-mapping", "--release-version", "3.9"]) == cli.EXIT_OK
    out = capsys.readouterr().out.splitlines()
    assert "kraft.version=1" in out and "metadata.version=21" in out and "group.version=0" in out
    argv = ["feature-dependencies", "--feature", "eligible.leader.replicas.version=1",
            "--feature", "group.version=1"]  # fmt: skip
    assert cli.main(argv) == cli.EXIT_OK
    assert capsys.readouterr().out == (
        "eligible.leader.replicas.version=1 requires:\n    metadata.version=23\n"
        "group.version=1 has no dependencies.\n"
    )


# -- a gateway's UpdateFeatures answer as a plan -----------------------------------------


def test_answered_plan_prints_like_a_zookeeper_plan_and_needs_every_result_ok() -> None:
    finalized = Finalized({"group.version": 1}, 4)
    updates = feature_updates("downgrade", [("group.version", 0), ("test.version", 1)])
    ok = answered_plan("downgrade", finalized, updates, [UpdateResult("group.version"),
                                                         UpdateResult("test.version")])  # fmt: skip
    assert ok.ok and ok.target == {"test.version": 1}
    assert outcome_lines(Outcome(ok, new_epoch=5)) == (
        ["group.version: 1 → 0", "test.version: 0 → 1", "epoch: 4 → 5"],
        [],
    )
    refused = UpdateResult("test.version", 31, "UpdateFeatures through kafka-gateway is refused")
    partial = answered_plan(
        "downgrade", finalized, updates, [UpdateResult("group.version"), refused]
    )
    assert not partial.ok
    assert outcome_lines(Outcome(partial)) == (
        [],
        [
            "error: test.version: UpdateFeatures through kafka-gateway is refused",
            "nothing written: featurectl applies every update or none",
        ],
    )
