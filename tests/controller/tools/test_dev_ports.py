"""``dev up`` refuses a port something listens on, not one that a stopped stack's
connections still hold in TIME-WAIT (``dev down`` then ``dev up`` was refused for a
minute)."""

from __future__ import annotations

import socket

from controller.tools import dev


def test_a_port_in_time_wait_is_free_and_a_listening_one_is_not() -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    assert not dev._port_free(port)  # listening
    accepted.close()  # the server side closes first: its end goes to TIME-WAIT
    client.recv(1)
    client.close()
    server.close()
    probe = socket.socket()
    try:
        probe.bind(("127.0.0.1", port))
        in_time_wait = False
    except OSError:
        in_time_wait = True
    finally:
        probe.close()
    assert in_time_wait  # what a plain bind (the old check) saw
    assert dev._port_free(port)
