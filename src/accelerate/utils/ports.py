"""Local TCP ports: one that is free now, and whether one is taken (a rendezvous port, say)."""

from __future__ import annotations

import socket

DEFAULT_PORT = 29500  # torch.distributed's default MASTER_PORT


def get_free_port() -> int:
    """A TCP port that nothing listens on right now (the kernel picks it; another process may take it later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port: int = sock.getsockname()[1]
        return port


def is_port_in_use(port: int | None = None) -> bool:
    """Whether something on this machine accepts connections on ``port`` (default 29500)."""
    port = DEFAULT_PORT if port is None else port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("localhost", port)) == 0


def can_bind(port: int, host: str = "", *, reuse_address: bool = False) -> bool:
    """True if a socket could bind ``port`` now.

    ``reuse_address`` binds as a listening server does (SO_REUSEADDR, as torch's TCPStore): a port in
    TIME_WAIT counts as free. Without it a port any socket holds, even one closing, counts as taken.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if reuse_address:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_is_free(port: int, host: str = "") -> bool:
    """True if a server could listen on ``port`` now (SO_REUSEADDR, as torch's TCPStore does)."""
    return can_bind(port, host, reuse_address=True)


def find_free_port() -> int:
    """A free port below Linux's ephemeral range (32768+), falling back to one the kernel picks.

    A port from bind(0) is ephemeral: any process's next outgoing connection may take it before
    the rendezvous store binds it. Ports below the range are only ever taken on purpose.
    """
    import random

    rng = random.Random()
    for _ in range(100):
        port = rng.randrange(20000, 32000)
        # A plain bind, unlike port_is_free: a port another process holds bound (a test's reservation,
        # a socket in TIME_WAIT) is skipped rather than shared.
        if can_bind(port):
            return port
    return get_free_port()
