"""How the supervisor starts workers: the fork server, or spawn where it cannot run.

A read-only root file system cannot be made here (tests run as root, which writes
anyway), so the missing temp directory is injected by patching tempfile.gettempdir to
fail as it does when no candidate directory is writable.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from gateway.features.catalogue import default_catalogue_path, load_catalogue
from gateway.server.workers import worker_context


def test_the_fork_server_preloads_the_gateway() -> None:
    context = worker_context()
    assert context.get_start_method() == "forkserver"


def test_without_a_writable_temp_directory_workers_are_spawned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_temp_dir() -> str:
        raise FileNotFoundError("No usable temporary directory found in ['/tmp']")

    monkeypatch.setattr(tempfile, "gettempdir", no_temp_dir)
    with structlog.testing.capture_logs() as logs:
        context = worker_context()
    assert context.get_start_method() == "spawn"
    assert [line["event"] for line in logs] == ["workers.start_method"]
    assert "writable /tmp" in logs[0]["fix"]


# What a worker runs at its start that loads code: multiprocessing runs the main script
# again (the console script, as "__mp_main__"), then the worker configures logging and
# builds its Gateway. In a fresh interpreter that first loads what the fork server loads.
WORKER_START = r"""
import json, runpy, sys
import gateway.worker_preload
before = set(sys.modules)
runpy.run_path(sys.argv[1], run_name="__mp_main__")
from gateway.config import load_config
from gateway.observability.logging import configure_logging
from gateway.server.app import Gateway
configure_logging("json", "info")
Gateway(load_config(None, {"upstream": "127.0.0.1:9092"}))
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_a_worker_starts_without_importing_what_the_fork_server_did_not() -> None:
    """A module a worker imports itself is one copy per worker, not one shared copy;
    gateway.cli (the console script's import) was one, ~1 MB more in each worker."""
    script = Path(sys.executable).parent / "kafka-gateway"
    assert script.exists(), "the project is installed with its console scripts"
    out = subprocess.run(
        [sys.executable, "-c", WORKER_START, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(out.stdout.splitlines()[-1]) == []


def test_the_built_in_catalogue_is_read_once_and_each_caller_gets_its_own_dict() -> None:
    first = load_catalogue()
    first.pop(next(iter(first)))  # a caller's change stays its own
    again = load_catalogue()
    assert again == load_catalogue(default_catalogue_path())  # the file as read now
    assert len(again) == len(first) + 1


PREBUILT = r"""
import json
from prometheus_client import generate_latest
import gateway.worker_preload
from gateway.server import supervisor
metrics = supervisor._prebuilt_metrics
print(json.dumps(None if metrics is None else generate_latest(metrics.registry).decode()))
"""


def test_the_fork_server_builds_the_workers_metrics_with_nothing_counted() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PREBUILT], capture_output=True, text=True, timeout=120, check=True
    )
    exposition = json.loads(out.stdout.splitlines()[-1])
    assert exposition is not None
    counters = [
        sample
        for family in text_string_to_metric_families(exposition)
        if family.type == "counter" and family.name.startswith("kafka_gateway_")
        for sample in family.samples
    ]
    assert counters, "the workers' metrics are the gateway's"
    assert all(sample.value == 0 for sample in counters)
