"""``featurectl describe``: per feature, the levels every live gateway can serve, the
finalized level and its epoch, and which gateways hold it back; then the live gateways.

Read from ZooKeeper, or with ``--bootstrap-server`` from one gateway's ApiVersions, as
``kafka-features.sh describe`` does.
"""

from __future__ import annotations

import argparse
import json

from gateway.commands import add_command
from gateway.features.catalogue import load_catalogue
from gateway.features.znode import Finalized, Registration

from ..connect import feature_store, kafka_client
from ..console import stdout_console
from ..exits import EXIT_CODES, EXIT_OK
from ..features import (
    FeatureRow,
    describe_document,
    describe_rows,
    features_table,
    gateways_table,
    withheld_lines,
)
from ..kafka import Described
from ..kafka_format import DESCRIBE_OUTPUTS
from ..kafka_format import describe_lines as kafka_describe_lines
from ..options import (
    CONNECTION,
    KAFKA_CONNECTION,
    check_feature_names,
    common_options,
    feature_name,
)

EPILOG = f"""\
examples:
  featurectl describe --zookeeper zk-0:2181
  featurectl describe --feature group.version --output json
  featurectl --bootstrap-server gw-0:9092 describe
  (TLS/SASL listeners: add --command-config admin.properties, keys below)

columns:
  SupportedMinVersion  the levels EVERY live gateway supports: the highest minimum
  SupportedMaxVersion  and the lowest maximum over all live gateways ('-': none live)
  FinalizedVersionLevel  the cluster-wide level (0: not finalized)
  Epoch                the finalized features' epoch ('-': never finalized)
  LimitedBy            gateways whose maximum is the cluster-wide one while another
                       gateway could serve more: the ones holding the feature back
  then, per feature the gateways' brokers finalized higher (from the registrations):
  "NAME: brokers finalized N, gateways hold M" and the command that would raise it

json (--output json): one document on stdout
  epoch      the finalized features' epoch (-1: never finalized)
  features   [{{"feature", "description" (null if not in the built-in catalogue),
               "supported_min_version", "supported_max_version" (null: no live
               gateway), "finalized_version_level", "limited_by": [ids],
               "broker_finalized_version_level" (null: no live gateway's broker
               reports features)}}]
  gateways   [{{"id", "listener", "upstream", "broker_software_name",
               "broker_software_version", "gateway_version", "metrics_url",
               "features": {{NAME: {{"min_version", "max_version"}}}}}}]

kafka (--output kafka): kafka-features.sh describe's own lines (Apache Kafka 4.4), for
scripts written for that tool: "Feature: NAME  SupportedMinVersion: N  ...  Epoch: E",
only the features every live gateway (--bootstrap-server: the answering one) supports

{CONNECTION}

{KAFKA_CONNECTION}

{EXIT_CODES}"""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands,
        "describe",
        parents=[common_options(DESCRIBE_OUTPUTS)],
        help_text="show supported and finalized feature levels and the live gateways",
        description=(
            "Show, per feature, the levels every live gateway can serve, the "
            "finalized level and its epoch, and which gateways hold a feature back; then the "
            "live gateways (id, listener, upstream, broker software, gateway version)."
        ),
        epilog=EPILOG,
    )
    parser.add_argument(
        "--feature",
        action="append",
        type=feature_name,
        metavar="NAME",
        help="only this feature (repeat for several)",
    )
    parser.set_defaults(handler=describe, parser=parser)


def describe(args: argparse.Namespace) -> int:
    if args.bootstrap_server is not None:
        with kafka_client(args) as client:
            described = client.describe()
            # As Kafka's tools: log in before anything else, so bad credentials show.
            client.authenticate()
        finalized = described.finalized
        # The answering gateway stands in for "every live gateway": over the protocol it
        # is the only one whose support featurectl can see.
        answering = [_as_registration(args.bootstrap_server, described)]
    else:
        with feature_store(args) as store:
            finalized = store.read()
            registrations = store.registrations()
            gateway_ids = store.paths.gateway_ids
        answering = registrations
    rows = describe_rows(finalized, answering, load_catalogue())
    if args.feature:
        check_feature_names(args.feature, {row.feature for row in rows})
        rows = [row for row in rows if row.feature in args.feature]
    if args.output == "kafka":
        for line in kafka_describe_lines(rows, answering):
            print(line)
        return EXIT_OK
    if args.bootstrap_server is not None:
        return _print_described_by_gateway(args, finalized, rows, described)
    if args.output == "json":
        print(json.dumps(describe_document(finalized, rows, registrations), indent=2))
        return EXIT_OK
    console = stdout_console()
    console.print(features_table(rows))
    console.print()
    for line in withheld_lines(rows):
        console.print(line, highlight=False, markup=False)
    if registrations:
        console.print(f"Live gateways ({len(registrations)}):")
        console.print(gateways_table(registrations))
    else:
        console.print(f"No live gateway is registered under {gateway_ids}.")
    return EXIT_OK


def _as_registration(address: str, described: Described) -> Registration:
    name, version = described.broker_software or ("unknown", "unknown")
    return Registration(
        gateway_id=address,
        listener=address,
        upstream="",
        features=described.supported,
        broker_software_name=name,
        broker_software_version=version,
    )


def _print_described_by_gateway(
    args: argparse.Namespace, finalized: Finalized, rows: list[FeatureRow], described: Described
) -> int:
    """describe --bootstrap-server: the same table and JSON keys; instead of the live
    gateways (only ZooKeeper knows them all), the gateway that answered."""
    name, version = described.broker_software or ("unknown", "unknown")
    software = "unknown" if name == version == "unknown" else f"{name} {version}"
    if args.output == "json":
        document = describe_document(finalized, rows, [])
        document["answered_by"] = {"bootstrap_server": args.bootstrap_server, "broker": software}
        print(json.dumps(document, indent=2))
        return EXIT_OK
    console = stdout_console()
    console.print(features_table(rows))
    console.print()
    console.print(
        f"Answered by {args.bootstrap_server} (broker software: {software}). Supported "
        "levels are that gateway's own; describe --zookeeper shows every live gateway."
    )
    return EXIT_OK
