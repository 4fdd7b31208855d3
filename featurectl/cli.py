"""``featurectl`` command line (commands arrive with the feature-gating work)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="featurectl",
        description="Describe and change cluster-wide finalized feature levels of kafka-gateway.",
    )
    parser.parse_args(argv)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
