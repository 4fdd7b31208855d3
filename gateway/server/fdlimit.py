"""The open-files limit: every client connection costs the gateway two descriptors.

A client connection holds its own socket and its upstream connection's, so a process
whose soft ``RLIMIT_NOFILE`` is the common default of 1024 tops out near 500 clients;
past that, libuv closes accepted connections unseen (its EMFILE trick) or the upstream
connect fails with "Too many open files" (``upstream.connect_failed``). The soft limit is
raised to the hard one at start, as the process may do unprivileged (nginx's
``worker_rlimit_nofile``, Kafka's own advice to raise ``ulimit -n``); workers inherit it.
"""

from __future__ import annotations

import resource

# An unlimited hard limit is taken as this much (Linux caps it at fs.nr_open anyway).
UNLIMITED_AS = 1 << 20


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return (soft before, soft after).

    Where the system refuses (a hard limit the kernel caps lower, macOS' OPEN_MAX),
    the soft limit stays as it was.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED_AS if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, target
    return soft, soft
