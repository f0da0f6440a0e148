"""accelerate.utils.ports: the bind checks the launcher and the test helpers pick ports with."""

from __future__ import annotations

import socket

from accelerate.utils.ports import can_bind, find_free_port, port_is_free


def test_a_port_a_listener_holds_cannot_be_bound_either_way() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("", 0))
        server.listen()
        port = server.getsockname()[1]
        assert not can_bind(port)
        assert not can_bind(port, reuse_address=True)
        assert not port_is_free(port)


def test_find_free_port_picks_a_bindable_port_below_the_ephemeral_range() -> None:
    port = find_free_port()
    assert 20000 <= port < 32000
    assert can_bind(port)
