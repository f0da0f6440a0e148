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
