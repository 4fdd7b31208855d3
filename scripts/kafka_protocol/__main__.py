"""scripts/kafka-protocol: regenerate (or check) the gateway's protocol data from Kafka's jars.

Each output is one ``Output`` in ``OUTPUTS``: a path under the repository and the function
that makes its text from the run's ``Generation``. Adding an output is adding one line
there (the feature levels read from kafka-server-common are one such line).
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from . import features, merge, releases
from .apikeys import JavaError
from .generation import JARS, Generation, load, render, render_fitted
from .maven import MavenError

ROOT = Path(__file__).resolve().parents[2]


class Output(NamedTuple):
    path: str
    """Relative to the repository root."""
    make: Callable[[Generation], str]


def _stamp(gen: Generation) -> dict[str, object]:
    return {"source": gen.source, "kafka": gen.release, "releases": list(gen.releases)}


def protocol_json(gen: Generation) -> str:
    """kafka_protocol.json: per API key the union over every release read."""
    apis = merge.api_table(gen.merged, gen.with_specs)
    # The union comes from the specs (2.2 on); every version any release's ApiKeys accepts,
    # 0.10.0's included, must be inside it.
    for release, dump in gen.dumps.items():
        for key, (name, oldest, latest) in dump.keys.items():
            known = apis.get(str(key), {}).get("versions", [0, -1])
            if oldest <= latest and not known[0] <= oldest <= latest <= known[1]:
                raise ValueError(f"{release}: {name} {oldest}-{latest} is outside {known}")
    return render({**_stamp(gen), "apis": apis}, rows="apis")


def messages_json(gen: Generation) -> str:
    """kafka_messages.json: the request, response and header specs, merged."""
    return render_fitted({**_stamp(gen), "messages": merge.messages_table(gen.merged)}) + "\n"


def releases_json(gen: Generation) -> str:
    """kafka_releases.json: what each release's broker advertises, per track."""
    tracks = releases.table(gen.releases, gen.specs, gen.dumps)
    return render({**_stamp(gen), "tracks": tracks}, rows="tracks")


def feature_levels_json(gen: Generation) -> str:
    """featurectl's kafka_feature_levels.json: each release's feature levels
    (``--release-version``), supported ranges and dependencies, from server-common."""
    return features.render(features.generate(gen.cache, gen.releases))


OUTPUTS: list[Output] = [
    Output("gateway/data/kafka_protocol.json", protocol_json),
    Output("gateway/data/kafka_messages.json", messages_json),
    Output("gateway/data/kafka_releases.json", releases_json),
    Output("featurectl/data/kafka_feature_levels.json", feature_levels_json),
]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scripts/kafka-protocol",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Regenerate the gateway's Kafka protocol data from Apache Kafka's own jars.\n\n"
            "Reads the kafka-clients jar of the newest patch of every minor release from\n"
            "0.10.0 up to --release (fetched with Maven into ~/.cache/kafka-gateway/jars,\n"
            "once): the message specs (common/message/*.json, 2.2 on) and the ApiKeys enum\n"
            "(a small Java program, compiled with javac at each run). Writes:\n"
            + "".join(f"  {o.path}\n" for o in OUTPUTS)
        ),
        epilog=(
            "examples:\n"
            "  scripts/kafka-protocol                 # rewrite the files (commit them)\n"
            "  scripts/kafka-protocol --check         # CI: exit 1 and a diff when stale\n"
            "  scripts/kafka-protocol --check --release 4.3.1   # what 4.4.0 changed\n\n"
            "A new Kafka release: add it to RELEASES in scripts/kafka_protocol/releases.py,\n"
            "run with --release X.Y.Z (or move DEFAULT_RELEASE), read the diff, commit.\n"
            "Needs mvn (Maven Central reachable) and a JDK 17+ (java, javac).\n\n"
            "exit status: 0 written or up to date, 1 stale (--check), 2 Maven or Java\n"
            "missing or failing, 3 a spec or a release broke a rule (see releases.py)."
        ),
    )
    p.add_argument(
        "--release",
        default=releases.DEFAULT_RELEASE,
        metavar="X.Y.Z",
        help=f"the newest release read (default {releases.DEFAULT_RELEASE}); older minor "
        "releases use their entry in RELEASES",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 with a unified diff when the committed files differ",
    )
    p.add_argument("--cache", type=Path, default=JARS, help=f"the jar cache (default {JARS})")
    return p


def generate(gen: Generation, into: Path) -> list[Path]:
    written = []
    for output in OUTPUTS:
        target = into / output.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(output.make(gen), encoding="utf-8")
        written.append(target)
    return written


def check(gen: Generation) -> int:
    """Regenerate into a temporary folder and diff against the committed files."""
    stale = 0
    with tempfile.TemporaryDirectory(prefix="kafka-protocol-") as tmp:
        generate(gen, Path(tmp))
        for output in OUTPUTS:
            fresh = (Path(tmp) / output.path).read_text(encoding="utf-8")
            committed_path = ROOT / output.path
            committed = committed_path.read_text("utf-8") if committed_path.exists() else ""
            if fresh == committed:
                continue
            stale += 1
            sys.stdout.writelines(
                difflib.unified_diff(
                    committed.splitlines(keepends=True),
                    fresh.splitlines(keepends=True),
                    f"a/{output.path}",
                    f"b/{output.path}",
                )
            )
    if stale:
        print(f"\n{stale} file(s) differ from what scripts/kafka-protocol makes", file=sys.stderr)
        return 1
    print(f"up to date ({len(OUTPUTS)} files, {len(gen.releases)} releases read)", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        gen = load(args.release, releases.pinned(args.release), args.cache)
        if args.check:
            return check(gen)
        for path in generate(gen, ROOT):
            print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
    except (MavenError, JavaError) as error:
        print(f"scripts/kafka-protocol: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        # A spec that does not read, or a release that breaks a rule of releases.py or
        # merge.py: the rules need a look before any file is trusted.
        print(f"scripts/kafka-protocol: {error}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
