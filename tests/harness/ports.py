"""Loopback port helpers.

Every part a test starts listens on a port the kernel picked, so several test runs (or
a developer's own Kafka on 9092) never collide. ``free_port`` is the gateway's own
(``gateway.server.embedded``): it never hands out one port twice in a process.
"""

from __future__ import annotations

import socket
import time

from gateway.server.embedded import free_port

__all__ = ["LOOPBACK", "free_port", "parse_host_port", "port_accepts", "wait_port_closed"]

LOOPBACK = "127.0.0.1"


def parse_host_port(value: str) -> tuple[str, int]:
    """Split ``host:port`` (or ``[v6]:port``) into its parts; raise ValueError when malformed."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    """Return True when a TCP connection to *host*:*port* succeeds right now."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port_closed(host: str, port: int, timeout: float = 10.0) -> bool:
    """Wait until nothing accepts on *host*:*port*; return False if it still does at the end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not port_accepts(host, port, timeout=0.2):
            return True
        time.sleep(0.05)
    return False
