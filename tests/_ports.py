"""A free TCP port for a server a test starts, below the kernel's range of ephemeral ports.

One helper for every test that picks a port first and starts a server (a process, a
receiver) on it later: each had its own copy. A port that bind(0) gives comes from the
ephemeral range, and once the caller releases it, any process's outgoing connection can get
it as its source port before the server binds it: seen in the full suite, under load, as a
cluster worker's metrics port taken so. Below that range the kernel hands out no port of its
own accord, so only another test picking the same port at random can collide, and the
port is checked free before it is returned."""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: how far below the ephemeral range the ports are drawn from
SPREAD = 12_000


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now, below the ephemeral range (bind(0)'s port when none
    of 100 random ones is free)."""
    low = ephemeral_low()
    for _ in range(100):
        port = random.randrange(max(1024, low - SPREAD), low)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def ephemeral_low() -> int:
    """The lowest port the kernel gives outgoing connections (32768 by Linux's default)."""
    try:
        bounds = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="ascii")
        return int(bounds.split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768
