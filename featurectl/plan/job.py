"""``featurectl plan``: which gateways and clients stand between the cluster and a level.

Reads a metrics dataset (``featurectl collect``) with PySpark, plus the live state
(ZooKeeper with ``--zookeeper``, else the dataset's newest state snapshot, else the
gateways' own feature gauges), and writes ``plan.json``, ``report.md`` and PNG charts.

Locally (``--master local[*]`` is the default)::

    featurectl plan --metrics metrics/ --target transaction.version=2 --out plan/

On a Spark cluster, submit this file from a machine with kafka-gateway installed (the
driver imports it). Executors need PySpark's usual Python but no project code: the
transformations are Spark SQL expressions, not Python UDFs. The dataset may live on
any file system Spark reads; ``--out`` is a directory on the driver (client deploy
mode). ``PYSPARK_PYTHON`` (or ``PYSPARK_DRIVER_PYTHON``) picks the driver's Python (else
spark-submit runs ``python3`` from the PATH)::

    PYSPARK_PYTHON=.venv/bin/python spark-submit --master spark://spark-master:7077 \\
        --deploy-mode client --driver-memory 4g --executor-memory 4g \\
        featurectl/plan/job.py --metrics s3a://ops/kafka-gateway/metrics \\
        --target group.version=1 --zookeeper zk-0:2181 --out plan/

``python featurectl/plan/job.py ...`` and ``python -m featurectl.plan.job ...`` take the
same arguments as ``featurectl plan``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

# Absolute imports only: spark-submit runs this file as a script, outside its package.
from featurectl.plan.arguments import EPILOG, configure_parser
from featurectl.plan.caps import CATALOGUE
from featurectl.plan.columnar import PARQUET_SUFFIX, SAMPLES, has_parquet
from featurectl.plan.compute import compute_plan
from featurectl.plan.decide import client_label
from featurectl.plan.layout import PROM_SUFFIX, SCRAPES
from featurectl.plan.model import PlanData, PlanInputs, UsageError
from featurectl.plan.report import write_report
from featurectl.plan.session import spark_session, under_spark_submit
from gateway.commands import add_command, pasteable

if TYPE_CHECKING:
    from gateway.features.catalogue import Catalogue

EXIT_OK = 0
EXIT_UNSAFE = 1
EXIT_USAGE = 2


def add_plan_subcommand(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = add_command(
        subparsers,
        "plan",
        help_text="plan feature upgrades/downgrades from collected metrics (PySpark)",
        description=(
            "Read a dataset from 'featurectl collect' with Spark and tell, per feature, the "
            "highest level every live gateway supports, which gateways must be upgraded "
            "before each --target level, which client software still uses API versions a "
            "downgrade would withdraw, and the featurectl commands to run, in order. Writes "
            "plan.json, report.md and charts to --out."
        ),
        epilog=EPILOG,
    )
    return configure_parser(parser, run_plan)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``spark-submit job.py`` / ``python -m featurectl.plan.job``."""
    parser = argparse.ArgumentParser(
        prog="featurectl plan",
        description="Plan feature upgrades/downgrades from collected gateway metrics.",
        epilog=pasteable(EPILOG),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return configure_parser(parser, run_plan)


def run_plan(args: argparse.Namespace) -> int:
    """``featurectl plan``: validate arguments, run Spark, write the report."""
    from featurectl.plan.readers import DatasetError
    from gateway.features.catalogue import CatalogueError, load_catalogue

    started = time.perf_counter()
    try:
        catalogue = load_catalogue(args.catalogue)
        inputs = PlanInputs(
            metrics=args.metrics,
            catalogue=catalogue,
            catalogue_path=args.catalogue,
            targets=_check_targets(args.target, catalogue),
            zookeeper=args.zookeeper,
            chroot=args.chroot,
            out=Path(args.out),
            since=args.since,
            until=args.until,
            releases=_check_releases(args.release),
        )
        if "://" not in args.metrics:
            _check_local_dataset(Path(args.metrics))
        if args.since and args.until and args.since >= args.until:
            raise UsageError(f"--since {args.since} is not before --until {args.until}")
    except (UsageError, CatalogueError) as exc:
        print(f"featurectl plan: {exc}", file=sys.stderr)
        return EXIT_USAGE

    if args.remote is not None:
        problem = _check_remote(args.remote, args.master, args.conf)
        if problem:
            print(f"featurectl plan: {problem}", file=sys.stderr)
            return EXIT_USAGE
    spark = spark_session(args.master, args.conf, remote=args.remote, verbose=args.verbose)
    try:
        data = compute_plan(spark, inputs)
    except (DatasetError, UsageError) as exc:
        print(f"featurectl plan: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if not under_spark_submit():
            spark.stop()
    data.timings["total"] = round(time.perf_counter() - started, 3)
    written = write_report(inputs, data)
    _print_summary(data, written)
    safe = all(v["safe"] for v in data.verdicts) and all(r["safe"] for r in data.releases)
    return EXIT_OK if safe else EXIT_UNSAFE


def _check_releases(releases: Sequence[str]) -> tuple[str, ...]:
    """--release values as the release tables name them ("4.0.1" is 4.0)."""
    from gateway.versions import release_named

    out: list[str] = []
    for text in releases:
        try:
            name = release_named(text).name
        except KeyError as exc:
            raise UsageError(f"--release: {exc.args[0]}") from None
        if name in out:
            raise UsageError(f"--release names {name} twice")
        out.append(name)
    return tuple(out)


def _check_remote(remote: str, master: str | None, conf: Sequence[tuple[str, str]]) -> str:
    """Why ``--remote`` cannot be used with these arguments ("" when it can)."""
    if master is not None:
        return "give --master or --remote, not both (the Connect server has its own master)"
    if not remote.startswith("sc://"):
        return f"--remote takes sc://HOST:PORT (a Spark Connect server), got {remote!r}"
    static = [key for key, _ in conf if not key.startswith("spark.sql.")]
    if static:
        return (
            f"--conf {', '.join(static)}: through Spark Connect only session settings "
            "(spark.sql.*) apply; set the others on the Connect server"
        )
    return ""


def _check_local_dataset(root: Path) -> None:
    """Fail before starting Spark when a local --metrics cannot be a dataset."""
    if not root.is_dir():
        raise UsageError(
            f"--metrics {root} is not a directory; collect one with 'featurectl collect --out DIR'"
        )
    if next((root / SCRAPES).glob(f"*/*{PROM_SUFFIX}"), None) is None and not has_parquet(root):
        raise UsageError(
            f"--metrics {root} holds no samples ({SAMPLES}/*/*{PARQUET_SUFFIX}) nor scrapes "
            f"({SCRAPES}/<round>/*{PROM_SUFFIX}); collect some with "
            "'featurectl collect --out DIR'"
        )


def _check_targets(targets: Sequence[tuple[str, int]], catalogue: Catalogue) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, level in targets:
        spec = catalogue.get(name)
        if spec is None:
            raise UsageError(
                f"unknown feature {name!r} in --target; the catalogue has: "
                f"{', '.join(sorted(catalogue))}"
            )
        if level > spec.max_level:
            raise UsageError(
                f"--target {name}={level}: the catalogue's highest level of {name} is "
                f"{spec.max_level}"
            )
        if name in out:
            raise UsageError(f"--target names {name} twice")
        out[name] = level
    return out


def _print_summary(data: PlanData, written: Mapping[str, Path]) -> None:
    ds = data.dataset
    print(
        f"featurectl plan: {ds['samples']:,} samples from {ds['gateways']} gateway(s), "
        f"{ds['scrapes']} scrape(s); state from {data.state['source']}"
    )
    for v in data.verdicts:
        status = "safe now" if v["safe"] else "NOT safe yet"
        detail = ""
        if v["blocking_gateways"]:
            mine = [
                b
                for b in data.blockers
                if b["feature"] == v["feature"] and b["level"] == v["level"]
            ]
            lacks = sorted(
                {b["lacks"] for b in mine if b.get("lacks") and b.get("cap") != CATALOGUE}
            )
            own = sorted({b["gateway_id"] for b in mine if b.get("cap") == CATALOGUE})
            causes = [f"their upstreams lack {'; '.join(lacks)}"] if lacks else []
            causes += [f"their own catalogues cap {', '.join(own)}"] if own else []
            why = f" ({'; '.join(causes)})" if causes else ""
            detail += f"; upgrade gateways first: {', '.join(v['blocking_gateways'])}{why}"
        if v["blocking_clients"]:
            names = ", ".join(client_label(c) for c in v["blocking_clients"])
            detail += f"; clients still using it: {names}"
        if v.get("reconnecting_clients"):
            names = ", ".join(client_label(c) for c in v["reconnecting_clients"])
            detail += f"; these reconnect and renegotiate: {names}"
        print(
            f"  {v['feature']}: {v['current_level']} -> {v['level']} ({v['kind']}): "
            f"{status}{detail}"
        )
    for r in data.releases:
        broken = [c for c in r["clients"] if c["verdict"].startswith("breaks")]
        old = [g["gateway_id"] for g in r["gateways"] if not g["ready"]]
        status = "safe" if r["safe"] else "NOT safe yet"
        detail = "".join(
            (
                f"; clients that break: {', '.join(client_label(c) for c in broken)}"
                if broken else "",
                f"; gateways to upgrade first: {', '.join(old)}" if old else "",
            )
        )  # fmt: skip
        print(f"  Kafka {r['release']}: {status}{detail}")
    if not data.verdicts and not data.releases:
        print("  nothing to plan: every feature is at the highest level all gateways support")
    print(
        f"wrote {written['report']}, {written['html']} and {written['plan']} "
        f"({data.timings['total']:.1f} s)"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
