"""``featurectl``: the operator's command line for kafka-gateway.

Exit codes: 0 ok, 1 the request was answered but rejected or failed, 2 usage or
connection error.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

EXIT_OK = 0
EXIT_REJECTED = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="featurectl",
        description="Operate kafka-gateway: broker software behind each gateway (KIP-885); "
        "finalized feature levels (KIP-584) arrive with the feature-gating work.",
        epilog="exit codes: 0 ok, 1 rejected/failed, 2 usage or connection error",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    brokers = commands.add_parser(
        "brokers",
        help="show the broker software name/version each gateway reports (KIP-885)",
        description="Ask each gateway for ApiVersions and print the BrokerSoftwareName/"
        "Version tagged fields it adds. Example: featurectl brokers --bootstrap gw-0:9092",
    )
    brokers.add_argument(
        "--bootstrap",
        action="append",
        required=True,
        metavar="HOST:PORT",
        help="a gateway address (repeat for several)",
    )
    brokers.add_argument("--output", choices=["table", "json"], default="table")
    brokers.add_argument(
        "--name-tag", type=int, default=10000, help="tag of BrokerSoftwareName [10000]"
    )
    brokers.add_argument(
        "--version-tag", type=int, default=10001, help="tag of BrokerSoftwareVersion [10001]"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "brokers":
        return _brokers(args)
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _brokers(args: argparse.Namespace) -> int:
    from gateway.interceptors.api_versions import SoftwareTags

    from .brokers import describe_brokers

    rows = describe_brokers(args.bootstrap, SoftwareTags(args.name_tag, args.version_tag))
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


if __name__ == "__main__":
    sys.exit(main())
