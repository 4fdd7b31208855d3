"""Go programs as test clients: builds and runs ``tests/clients/go`` (``gatewayclient``,
franz-go) and ``tests/clients/go-sarama`` (``gatewaysarama``, IBM/sarama pinned to an old
Kafka release, for the version bridge).

franz-go asks for the newest version of every request it knows and picks per request
the highest version both it and the broker advertise, so it is the sharpest probe of
the gateway's version negotiation. Each Go program prints JSON lines (one event each);
``GoClient.run`` returns them parsed.

Each program's binary is built once per source state: the cache key hashes go.mod, go.sum, every
``*.go`` file and ``go version``, and the binary lands in
``$XDG_CACHE_HOME/kafka-gateway/go-clients/<key>/`` (never in the repository). The
build is driven by the repository's go.mod/go.sum only (``-mod=readonly``), so a fresh
machine downloads exactly the pinned modules from the Go module proxy into Go's own
module cache. A file lock keeps parallel test processes from building twice.

Kept free of pytest imports like the rest of the harness: without ``go`` on PATH,
``build()`` raises ``GoMissing``, whose message is a skip reason the suite's
"optional tools" summary counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gateway.server.apache_kafka import cache_root, file_lock

from .procs import HarnessError
from .tools import find_tool, missing_tool_reason

_CLIENTS = Path(__file__).resolve().parents[1] / "clients"


@dataclass(frozen=True)
class GoProgram:
    """One Go module under ``tests/clients`` and the binary it builds."""

    source_dir: Path
    binary_name: str
    purpose: str  # the skip reason's "... need it"


FRANZ_GO = GoProgram(_CLIENTS / "go", "gatewayclient", "franz-go tests")
SARAMA = GoProgram(_CLIENTS / "go-sarama", "gatewaysarama", "sarama tests")

#: A cold build (module download ~3 s, compiling the standard library and franz-go) took
#: ~2 min on a busy 2-core machine; later builds are cached. Below pytest's 300 s per
#: test, which the first test's setup (this build) counts against.
BUILD_TIMEOUT_S = 240.0


class GoMissing(HarnessError):
    """``go`` is not on PATH; the message is the skip reason (``MISSING_TOOL`` prefix)."""


@dataclass(frozen=True)
class GoRun:
    """One ``gatewayclient`` run: its exit code, parsed JSON events and stderr."""

    argv: list[str]
    returncode: int
    events: list[dict[str, Any]]
    stderr: str

    def of(self, event: str) -> list[dict[str, Any]]:
        """Every event of that name, in output order."""
        return [e for e in self.events if e["event"] == event]

    def one(self, event: str) -> dict[str, Any]:
        """The single event of that name (HarnessError if there is not exactly one)."""
        found = self.of(event)
        if len(found) != 1:
            raise HarnessError(f"expected one {event!r} event, got {len(found)}\n{self}")
        return found[0]

    @property
    def requests(self) -> dict[str, list[int]]:
        """Request name -> versions the client sent (the program's last "wire" event)."""
        return self.one("wire")["requests"]

    @property
    def values(self) -> list[str]:
        """Values of the "consumed" records, in the order the client returned them."""
        return [e["value"] for e in self.of("consumed")]

    @property
    def values_produced(self) -> list[str]:
        """Values of the "produced" records, in the order they were acknowledged."""
        return [e["value"] for e in self.of("produced")]

    def __str__(self) -> str:
        lines = [json.dumps(e, sort_keys=True) for e in self.events]
        return "\n".join([" ".join(self.argv), *lines, self.stderr.strip()])


def _source_files(program: GoProgram) -> list[Path]:
    source = program.source_dir
    return sorted([source / "go.mod", source / "go.sum", *source.glob("*.go")])


def _build_key(go: str, program: GoProgram) -> str:
    digest = hashlib.sha256()
    toolchain = subprocess.run(
        [go, "version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    digest.update(toolchain.encode())
    # Each module's go.mod names it, so two programs never share a key.
    for path in _source_files(program):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@cache
def build(program: GoProgram = FRANZ_GO) -> Path:
    """Build ``program`` unless this source state's binary is cached already."""
    go = find_tool("go")
    if go is None:
        raise GoMissing(missing_tool_reason("go", f"{program.purpose} need it"))
    target = cache_root() / "go-clients" / _build_key(go, program)
    binary = target / program.binary_name
    with file_lock(target.with_suffix(".lock")):
        if binary.exists():
            return binary
        target.mkdir(parents=True, exist_ok=True)
        partial = target / f"{program.binary_name}.partial"
        # go.mod/go.sum decide (-mod=readonly); no VCS stamp (the shared work tree's git
        # state is not the binary's business); no cgo, so no C toolchain is needed.
        env = dict(os.environ, GOFLAGS="-mod=readonly -buildvcs=false", CGO_ENABLED="0")
        done = subprocess.run(
            [go, "build", "-trimpath", "-o", str(partial), "."],
            cwd=program.source_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise HarnessError(f"go build in {program.source_dir} failed:\n{done.stderr}")
        os.replace(partial, binary)
        return binary


class GoClient:
    """Runs a built Go program's subcommands against one bootstrap address."""

    def __init__(self, binary: Path, bootstrap: str) -> None:
        self.binary = binary
        self.bootstrap = bootstrap

    def run(
        self, command: str, *, timeout_s: float = 20.0, check: bool = True, **flags: Any
    ) -> GoRun:
        """Run ``<binary> <command> -bootstrap ... -<flag> <value>``.

        Flag names are the keyword names with ``_`` as ``-`` (``txn_id`` -> ``-txn-id``);
        a bool becomes ``-name=true``/``-name=false``.
        The program bounds itself by ``-timeout``; the process gets 10 s more. With
        ``check`` (the default) a non-zero exit raises HarnessError with the output.
        """
        argv = [
            str(self.binary),
            command,
            "-bootstrap",
            self.bootstrap,
            "-timeout",
            f"{timeout_s}s",
        ]
        for name, value in flags.items():
            flag = f"-{name.replace('_', '-')}"
            # Go's flag package reads a bool only as -name or -name=false.
            argv += (
                [f"{flag}={str(value).lower()}"] if isinstance(value, bool) else [flag, str(value)]
            )
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 10)
        events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        result = GoRun(argv, done.returncode, events, done.stderr)
        if check and done.returncode != 0:
            raise HarnessError(f"{self.binary.name} {command} exited {done.returncode}:\n{result}")
        return result


# --------------------------------------------------------------------------------------
# Checks on what franz-go sent and read (plain asserts, used by the tests)
# --------------------------------------------------------------------------------------


#: Requests franz-go always sends at min(its newest, the advertised max). Others it pins
#: lower in some contexts (kgo's pinReq): AddPartitionsToTxn at v3 (v4+ is
#: inter-broker), EndTxn at v4 without KIP-890 part 2, OffsetFetch/OffsetCommit/
#: TxnOffsetCommit lower when a topic has no ID, FindCoordinator v3 for single lookups.
UNPINNED = frozenset(
    {
        "Produce",
        "Fetch",
        "Metadata",
        "ListOffsets",
        "InitProducerID",
        "JoinGroup",
        "SyncGroup",
        "LeaveGroup",
        "CreateTopics",
        "DescribeCluster",
    }
)


def assert_negotiated(run: GoRun, advertised: dict[str, list[int]]) -> None:
    """franz-go sent only advertised keys and versions, the newest where it does not pin.

    ApiVersions is the exception by design: franz-go first tries its newest and, on
    UNSUPPORTED_VERSION, retries with the version the answer names; the retry must be
    the gateway's max.
    """
    client_max = run.one("wire")["client_max"]
    for name, sent in run.requests.items():
        assert name in advertised, f"franz-go sent {name}, which the gateway does not advertise"
        low, high = advertised[name]
        expected = min(client_max[name], high)
        if name == "ApiVersions":
            assert sent[0] == expected, f"ApiVersions retry: sent {sent}, advertised {expected}"
            continue
        assert all(low <= v <= high for v in sent), f"{name}: sent {sent}, advertised {[low, high]}"
        if name in UNPINNED:
            assert sent == [expected], f"{name}: sent {sent}, expected v{expected}\n{run}"


def release_tuple(text: str) -> tuple[int, ...]:
    """A release as a comparable tuple: "4.4" -> (4, 4)."""
    return tuple(int(part) for part in text.split("."))


def claim_covers(claim: str, release: str) -> bool:
    """Whether the gateway's fingerprint ("3.7", "3.3-3.4", ">=4.2") includes ``release``."""
    if claim == "unknown":
        return False
    at = release_tuple(release)
    if claim.startswith(">="):
        return at >= release_tuple(claim[2:])
    low, _, high = claim.partition("-")
    return release_tuple(low) <= at <= release_tuple(high or low)


def finalized_out_of_range(answer: dict[str, Any]) -> dict[str, str]:
    """Features whose finalized level lies outside the supported range, with both."""
    problems = {}
    for name, level in answer["finalized_features"].items():
        low, high = answer["supported_features"].get(name, [0, 0])
        if not low <= level <= high:
            problems[name] = f"finalized {level}, supported {[low, high]}"
    return problems
