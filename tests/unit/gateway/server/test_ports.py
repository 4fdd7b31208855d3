"""``free_port``: each port once per process, and out of the way of outgoing connections.

Picking ports at random repeats some of them (500 picks from the 12,000 ports below
Linux's ephemeral range repeat about ten; bind(0) repeated about 6% of 2000 picks on
this box). A repeat once gave a test gateway the same port for its listener and its
metrics endpoint, and it failed to start.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gateway.server.embedded import free_port

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def test_free_port_never_repeats_within_a_process() -> None:
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


@pytest.mark.skipif(not RANGE.exists(), reason="Linux only: reads ip_local_port_range")
def test_free_port_is_below_the_ephemeral_range() -> None:
    # An outgoing connection's source port comes from the ephemeral range, so a port
    # below it cannot be taken between free_port() and the child's bind.
    low = int(RANGE.read_text().split()[0])
    if low < 2024:
        pytest.skip(f"ephemeral range starts at {low}: no room below it")
    assert all(port < low for port in (free_port() for _ in range(50)))
