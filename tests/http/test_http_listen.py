"""`ptt serve --transport http` takes its socket before anything starts: a host that is not this machine's or a port
something else holds is refused with its fix, before the worker pool starts or a token is printed."""

from __future__ import annotations

import socket

import pytest

from mcp_server.engine.errors import EnvironmentUnavailable, UsageError
from mcp_server.http_serve import listen_socket


@pytest.fixture
def held_port():
    """A loopback port another socket is listening on."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    yield holder.getsockname()[1]
    holder.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_free_port_gives_a_listening_socket_a_client_can_reach():
    port = _free_port()
    sock = listen_socket("127.0.0.1", port)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            conn, _ = sock.accept()
            conn.close()
    finally:
        sock.close()


def test_a_port_in_use_is_refused_naming_another_port(held_port):
    with pytest.raises(EnvironmentUnavailable, match=f"port {held_port} on 127.0.0.1 is in use.*another --port"):
        listen_socket("127.0.0.1", held_port)


@pytest.mark.parametrize(
    ("host", "said"),
    [("999.1.1.1", "not an address this machine can resolve"), ("192.0.2.1", "not an address of this machine")],
)
def test_a_host_that_is_not_this_machines_is_refused_naming_addresses_that_are(host, said):
    with pytest.raises(UsageError, match=f"--host {host} is {said}.*127.0.0.1"):
        listen_socket(host, _free_port())


def test_the_cli_refuses_a_port_in_use_before_starting_the_pool_or_printing_a_token(held_port, capsys):
    from mcp_server.cli import main

    assert main(["--no-daemon", "serve", "--transport", "http", "--port", str(held_port)]) == 3
    err = capsys.readouterr().err
    assert "in use" in err
    assert "starting the worker pool" not in err and "token" not in err
