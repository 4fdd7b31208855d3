"""Each log line reaches stderr in one write, so workers sharing stderr cannot split lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# A child that logs through the gateway's configuration, with stderr written straight
# through (as in the image: PYTHONUNBUFFERED=1), and reports every write() stderr's raw
# file received. The raw file is wrapped, not faked: the writes still reach the real fd.
CHILD = r"""
import io, json, sys
from gateway.observability.logging import configure_logging, get_logger

writes = []
raw = sys.stderr.buffer
class Recording(io.RawIOBase):
    def writable(self): return True
    def write(self, b):
        writes.append(bytes(b))
        return raw.write(b)
sys.stderr = io.TextIOWrapper(Recording(), encoding="utf-8", write_through=True)
configure_logging("json", "info")
log = get_logger("t")
for i in range(50):
    log.info("line.logged", i=i, pad="x" * (i * 10))
sys.stderr.flush()
print(json.dumps([w.decode() for w in writes]))
"""


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_every_line_is_one_write(unbuffered: str) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED=unbuffered)
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[4],
    )
    writes = json.loads(out.stdout)
    assert len(writes) == 50
    for i, chunk in enumerate(writes):
        assert chunk.endswith("\n") and chunk.count("\n") == 1, chunk
        assert json.loads(chunk)["i"] == i
    # And what reached the real stderr is the same 50 whole lines.
    lines = out.stderr.splitlines()
    assert [json.loads(line)["i"] for line in lines] == list(range(50))
