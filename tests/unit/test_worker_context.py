"""How the supervisor starts workers: the fork server, or spawn where it cannot run.

A read-only root file system cannot be made here (tests run as root, which writes
anyway), so the missing temp directory is injected by patching tempfile.gettempdir to
fail as it does when no candidate directory is writable.
"""

from __future__ import annotations

import tempfile

import pytest
import structlog

from gateway.server.supervisor import worker_context


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
