"""Loopback ports: a free one, a free span of them, and whether one is taken."""

from __future__ import annotations

import random
import socket

HOST = "127.0.0.1"

# Ports free_span handed out in this process: a second caller must not pick them while the first one's server starts.
_handed_out: set[int] = set()


def free_port() -> int:
    """A port the kernel says is free now (port 0, from the ephemeral range)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
            return True
        except OSError:
            return False


def port_open(port: int) -> bool:
    """Whether something accepts connections on the port."""
    try:
        socket.create_connection((HOST, port), timeout=0.2).close()
        return True
    except OSError:
        return False


def free_span(room: int = 0) -> int:
    """The first of `room` + 1 free loopback ports in a row, below the ephemeral range (where outgoing connections and
    port-0 binds would take one between the choice and the bind), and not handed out before by this process."""
    for _ in range(500):
        port = random.randrange(20000, 32000)
        span = range(port, port + room + 1)
        if any(p in _handed_out for p in span) or not all(bindable(p) and not port_open(p) for p in span):
            continue
        _handed_out.update(span)
        return port
    raise RuntimeError("no free span of ports below the ephemeral range")
