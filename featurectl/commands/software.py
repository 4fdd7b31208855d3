"""``featurectl brokers``: the broker software name and version each gateway reports in
its ApiVersions tagged fields (KIP-885).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from gateway.commands import add_command, wrap

from ..connect import client_config
from ..exits import EXIT_OK, EXIT_USAGE, CliError
from ..kafka import KafkaClientError
from ..options import kafka_options


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands,
        "brokers",
        help_text="show the broker software name/version each gateway reports (KIP-885)",
        description=(
            "Ask each gateway for ApiVersions and print the BrokerSoftwareName/Version "
            "tagged fields it adds."
        ),
        epilog="examples:\n  featurectl brokers --bootstrap gw-0:9092\n"
        "  featurectl --bootstrap-server gw-0:9092 brokers\n\n"
        + wrap(
            "--bootstrap-server: the addresses are the brokers a Metadata request through "
            "it lists, as a Kafka client sees them (through a gateway: the gateway "
            "listeners it advertises)."
        ),
    )
    parser.add_argument(
        "--bootstrap",
        action="append",
        metavar="HOST:PORT",
        help="a gateway address (repeat for several)",
    )
    kafka_options(parser.add_argument_group("Kafka protocol (instead of --bootstrap)"))
    parser.add_argument("--output", choices=["table", "json"], default="table")
    parser.add_argument(
        "--name-tag", type=int, default=10000, help="tag of BrokerSoftwareName [10000]"
    )
    parser.add_argument(
        "--version-tag", type=int, default=10001, help="tag of BrokerSoftwareVersion [10001]"
    )
    parser.set_defaults(handler=brokers, parser=parser)


def brokers(args: argparse.Namespace) -> int:
    from gateway.interceptors.api_versions import SoftwareTags

    from ..brokers import advertised_brokers, describe_brokers

    if (args.bootstrap is None) == (args.bootstrap_server is None):
        args.parser.error("pass --bootstrap HOST:PORT (repeatable) or --bootstrap-server HOST:PORT")
    config = client_config(args)
    addresses = args.bootstrap
    if args.bootstrap_server is not None:
        try:
            addresses = advertised_brokers(args.bootstrap_server, config)
        except (KafkaClientError, ValueError) as exc:
            raise CliError(EXIT_USAGE, str(exc)) from None
    tags = SoftwareTags(args.name_tag, args.version_tag)
    rows = describe_brokers(addresses, tags, config=config)
    if args.output == "json":
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        print(f"{'Gateway':<28} {'BrokerSoftwareName':<22} {'BrokerSoftwareVersion':<22}")
        for r in rows:
            if r.error:
                print(f"{r.address:<28} error: {r.error}")
            else:
                print(f"{r.address:<28} {r.name or '-':<22} {r.version or '-':<22}")
    return EXIT_USAGE if any(r.error for r in rows) else EXIT_OK
