"""``gateway.server.ports``: the check that binds every configured port before a start.

Real sockets on loopback: a listener (plain, or a worker's SO_REUSEPORT one) makes a
port taken; a port left in TIME_WAIT by the last run does not.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from gateway.config import Config, HostPort
from gateway.server.embedded import free_port
from gateway.server.ports import Port, PortInUse, configured_ports, first_taken, hold

LOOPBACK = "127.0.0.1"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server((LOOPBACK, free_port())) as sock:
        yield sock


def port_of(sock: socket.socket) -> HostPort:
    return HostPort(LOOPBACK, int(sock.getsockname()[1]))


def test_a_listening_port_is_taken_and_named_with_its_flag(listener: socket.socket) -> None:
    taken = Port(port_of(listener), "--metrics-listen", "metrics_listen")
    free = Port(HostPort(LOOPBACK, free_port()), "--listen", "listen")
    with pytest.raises(PortInUse) as raised:
        hold([free, taken])
    assert raised.value.port == taken
    assert str(raised.value) == (
        f"{taken.address} is already in use (another kafka-gateway or scripts/run?); "
        "pick another with --metrics-listen HOST:PORT (config: metrics_listen)"
    )
    # The free one was released on the way out: it binds again.
    for sock in hold([free]):
        sock.close()


def test_workers_reuseport_listener_counts_as_taken() -> None:
    """Another gateway's workers share their port with SO_REUSEPORT; this one's would
    join them silently, so the check (which never sets it) must see the port taken."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((LOOPBACK, free_port()))
        sock.listen()
        port = Port(port_of(sock), "--listen", "listen")
        assert first_taken([port]) == port


def test_held_ports_stay_bound_until_closed() -> None:
    port = Port(HostPort(LOOPBACK, free_port()), "--listen", "listen")
    held = hold([port])
    try:
        with socket.socket() as other, pytest.raises(OSError):
            other.bind((LOOPBACK, port.address.port))  # without SO_REUSEADDR: refused
    finally:
        for sock in held:
            sock.close()
    assert first_taken([port]) is None


def test_a_port_in_time_wait_is_not_taken() -> None:
    """A gateway restarted right after a stop finds its port with the last run's
    closed connections in TIME_WAIT; the listener binds with SO_REUSEADDR, so does the
    check."""
    with socket.create_server((LOOPBACK, free_port())) as server:
        address = port_of(server)
        client = socket.create_connection((LOOPBACK, address.port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its end goes to TIME_WAIT
        client.recv(1)
        client.close()
    assert first_taken([Port(address, "--listen", "listen")]) is None


def test_configured_ports_leave_out_port_0_and_take_pinned_cluster_ports() -> None:
    config = Config(
        listen=HostPort(LOOPBACK, 0),
        metrics_listen=HostPort(LOOPBACK, 9404),
        mode="cluster",
        ports={2: 19102},
    )
    assert [(p.address.port, p.flag) for p in configured_ports(config)] == [
        (9404, "--metrics-listen"),
        (19102, None),
    ]
    cluster = configured_ports(config)[1]
    assert cluster.advice().endswith(
        "pick another with [cluster] ports (2 = 19102) or port_base in the config file"
    )
