"""Optional command-line tools some tests use, and how to find them.

A test that needs one of these skips without it (``tests.conftest.require_tool``); the
end of the run names what was missing and how many tests skipped for it, so a machine
without kcat does not pass silently with fewer tests. ``.ci/run`` installs the ones
Debian packages.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

# Skip reasons start with this, followed by the tool's name; conftest counts them.
MISSING_TOOL = "missing tool: "


@dataclass(frozen=True)
class OptionalTool:
    name: str
    # Executables that provide it, in order of preference (an older name still found).
    executables: tuple[str, ...]
    install: str


OPTIONAL_TOOLS: dict[str, OptionalTool] = {
    tool.name: tool
    for tool in (
        OptionalTool("kcat", ("kcat", "kafkacat"), "apt-get install kcat"),
        OptionalTool("socat", ("socat",), "apt-get install socat"),
        # The README walkthrough reads /metrics with it.
        OptionalTool("curl", ("curl",), "apt-get install curl"),
        # A real Prometheus server, and its rule checker; Debian packages both as prometheus.
        OptionalTool("prometheus", ("prometheus",), "apt-get install prometheus"),
        OptionalTool("promtool", ("promtool",), "apt-get install prometheus"),
        # Opens featurectl plan's report.html headless.
        OptionalTool("chromium", ("chromium", "chromium-browser"), "apt-get install chromium"),
        OptionalTool("kubectl", ("kubectl",), "https://kubernetes.io/docs/tasks/tools/"),
        OptionalTool(
            "docker-compose", ("docker-compose", "docker"), "apt-get install docker-compose"
        ),
        OptionalTool("systemd-analyze", ("systemd-analyze",), "apt-get install systemd"),
        # The Java client probe (tests/clients/java): Maven builds it, javac compiles it.
        OptionalTool("mvn", ("mvn",), "apt-get install maven"),
        OptionalTool("javac", ("javac",), "apt-get install openjdk-17-jdk-headless"),
        # The franz-go client (tests/clients/go): 1.21+ fetches the 1.26 toolchain it asks.
        OptionalTool("go", ("go",), "https://go.dev/dl/"),
    )
}


def find_tool(name: str) -> str | None:
    """The path of optional tool ``name`` on PATH, or None."""
    for executable in OPTIONAL_TOOLS[name].executables:
        found = shutil.which(executable)
        if found is not None:
            return found
    return None


def missing_tool_reason(name: str, detail: str = "") -> str:
    """The skip reason for a test that cannot run without ``name`` (counted by conftest)."""
    reason = f"{MISSING_TOOL}{name} ({OPTIONAL_TOOLS[name].install})"
    return f"{reason}; {detail}" if detail else reason
