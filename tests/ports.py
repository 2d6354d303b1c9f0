"""Free ports for the servers the tests start (runwright serve, redis-server, PgBouncer, a
TCP proxy), safe when the suite runs in parallel (pytest-xdist).

A port from bind(("127.0.0.1", 0)) is one of the kernel's ephemeral ports: the same range
every outgoing connection takes its local port from. Between the moment a test learns the
port and the moment its server (a process still starting) binds it, any connection made on
the machine (the other workers' thousands of PostgreSQL and Redis sessions) may take it, and
the server then fails to listen; a redis-server a test stops and starts again on its port
has the same gap. So the ports here come from below the ephemeral range, from a block of
each xdist worker's own (`PYTEST_XDIST_WORKER`), handed out in turn, each checked free: no
outgoing connection takes them, and no two workers share one.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from pathlib import Path

__all__ = ["free_port", "free_ports"]

BLOCK = 500  # ports per worker
FIRST = 12000  # the first block's first port; the blocks end below the ephemeral range


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw3" under xdist; unset serially
    return int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0


def _block() -> range:
    blocks = max(1, (_ephemeral_start() - FIRST) // BLOCK)
    first = FIRST + (_worker_index() % blocks) * BLOCK
    return range(first, first + BLOCK)


_block_ports = _block()
# Where in the block to go on from: a random start, so that two suites run at once on the
# machine (not two workers of one, which have blocks apart) seldom walk the same ports.
_turn = itertools.islice(itertools.cycle(_block_ports), random.randrange(BLOCK), None)


def _bindable(port: int, host: str) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(count: int, host: str = "127.0.0.1") -> int:
    """The first of `count` consecutive ports free now, of this worker's block."""
    for _ in range(BLOCK):
        first = next(_turn)
        if first + count > _block_ports.stop:
            continue
        if all(_bindable(port, host) for port in range(first, first + count)):
            for _ in range(count - 1):  # the next ask starts past these
                next(_turn)
            return first
    raise RuntimeError(f"no {count} consecutive free ports in {_block_ports} on {host}")


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, of this worker's block (see the module's doc)."""
    return free_ports(1, host)
