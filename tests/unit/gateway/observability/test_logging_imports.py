"""The gateway's processes do not load rich (structlog would, for its console tracebacks),
and rich still works for featurectl once the gateway's modules are loaded."""

from __future__ import annotations

import json
import subprocess
import sys

# A fresh interpreter: the test session itself has long imported rich (featurectl's tests).
CHILD = r"""
import json, sys
import gateway.server.supervisor  # what the supervisor loads
import gateway.worker_preload    # what the workers' fork server loads
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("rich", "pygments"))

from gateway.observability.logging import configure_logging, get_logger
import io
sys.stderr = io.StringIO()
configure_logging("console", "info")
try:
    raise ValueError("boom")
except ValueError:
    get_logger("t").exception("failed")
console = sys.stderr.getvalue()

from rich.console import Console
from rich.table import Table
table = Table("feature", "level")
table.add_row("metadata.version", "7")
out = Console(width=40, record=True, file=io.StringIO())
out.print(table)
print(json.dumps({"loaded": loaded, "console": console, "table": out.export_text()}))
"""


def test_gateway_processes_load_no_rich_and_featurectl_still_can() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=True
    )
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["loaded"] == []
    # Console logs still carry the traceback, in plain form.
    assert "Traceback (most recent call last)" in report["console"]
    assert "ValueError: boom" in report["console"]
    assert "metadata.version" in report["table"]
