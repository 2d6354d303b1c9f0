"""Is a process on this machine alive? SQLite workers share one machine, so a dead
owner is found by its pid at once instead of waiting out a heartbeat. And is the
database's write lock free (what `runwright verify` and the tests wait for before they
stop a worker, so that it is not stopped inside a write)?"""

from __future__ import annotations

import sqlite3

from .._liveness import pid_alive

__all__ = ["pid_alive", "write_lock_free"]


def write_lock_free(path: str, timeout_s: float) -> bool:
    """True unless a process holds the write lock of the database at `path` for longer
    than `timeout_s`."""
    conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:  # "database is locked"
        return False
    finally:
        conn.close()
