"""The gateway raises its soft open-files limit, since each client costs it two."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap

from gateway.server.fdlimit import raise_open_files_limit


def test_a_low_soft_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(soft, 64) if hard == resource.RLIM_INFINITY else min(hard, 64)
    # In a child: the test process keeps its own limit.
    script = textwrap.dedent(
        f"""
        import resource
        from gateway.server.fdlimit import UNLIMITED_AS, raise_open_files_limit
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, ({low}, hard))
        before, after = raise_open_files_limit()
        want = UNLIMITED_AS if hard == resource.RLIM_INFINITY else hard
        now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert before == {low}, before
        assert after == now == want, (after, now, want)
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_limit_already_at_the_hard_one_is_left_alone() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:  # raise it first, as the gateway would
        raise_open_files_limit()
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    before, after = raise_open_files_limit()
    assert before == after == soft
