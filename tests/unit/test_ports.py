"""``free_port`` hands out each port once per process.

The kernel's bind-to-port-0 picks at random, so a few thousand picks repeat some ports
(about 6% of 2000 on this box). A repeat once gave a test gateway the same port for its
listener and its metrics endpoint, and it failed to start.
"""

from __future__ import annotations

import socket

from gateway.server.embedded import free_port


def test_free_port_never_repeats_within_a_process() -> None:
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
