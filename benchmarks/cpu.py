"""CPU time spent per run, in the worker processes and in the database server, read from
/proc (utime + stime of each process), so that the next optimisation is chosen from where
the time goes, not from a guess. A CPU figure holds on a loaded machine, where a rate does
not: other processes slow a run down, but do not add to its own CPU seconds.

The database's share is the CPU of the server processes that serve the measured clients:
on PostgreSQL the backends whose application_name names the benchmark's schema, at its end
or before a pid (the store's sessions `runwright:<schema>:<pid>`, the fleet's, and the raw
baseline's), on Redis the server process
(INFO's process_id: every client of that server counts, so use a quiet one). SQLite runs in
the workers' own processes: its share is inside theirs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Coroutine, Iterable

import asyncpg
import redis.asyncio

__all__ = ["CpuMeter", "CpuSample", "pg_backends", "process_cpu_s", "redis_server"]

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The command name (field 2) may hold spaces: split after its closing paren.
            fields = stat.read().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime


def pg_backends(dsn: str, schema: str) -> Callable[[], Coroutine[Any, Any, list[int]]]:
    """The pids of the PostgreSQL backends that serve sessions of `schema`."""

    async def pids() -> list[int]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1"
                                    " OR application_name LIKE $2", f"%:{schema}", f"%:{schema}:%")
        finally:
            await conn.close()
        return [row["pid"] for row in rows]

    return pids


def redis_server(url: str) -> Callable[[], Coroutine[Any, Any, list[int]]]:
    """The pid of the Redis server behind `url` (a local one: its /proc is read)."""

    async def pids() -> list[int]:
        client = redis.asyncio.Redis.from_url(url)
        try:
            info = await client.info("server")
        finally:
            await client.aclose()
        return [int(info["process_id"])]

    return pids


@dataclass
class CpuSample:
    """CPU seconds per pid, read at one moment."""

    seconds: dict[int, float] = field(default_factory=dict)

    @classmethod
    def of(cls, pids: Iterable[int]) -> CpuSample:
        sample = cls()
        for pid in pids:
            cpu = process_cpu_s(pid)
            if cpu is not None:
                sample.seconds[pid] = cpu
        return sample

    def since(self, before: CpuSample) -> float:
        """CPU seconds spent between `before` and this sample by the processes alive at both
        (a process that started or ended in between would count only part of its time)."""
        return sum(now - before.seconds[pid] for pid, now in self.seconds.items() if pid in before.seconds)


@dataclass
class CpuMeter:
    """Samples the workers and the database server together, at the start and the end of a
    phase; `per_run_us` gives each side's CPU microseconds per run of the phase."""

    workers: Callable[[], list[int]]
    database: Callable[[], Awaitable[list[int]]] | None = None
    _start: tuple[CpuSample, CpuSample] | None = None
    _db_pids: list[int] = field(default_factory=list)

    async def start(self) -> None:
        self._db_pids = await self.database() if self.database else []
        self._start = (CpuSample.of(self.workers()), CpuSample.of(self._db_pids))

    async def per_run_us(self, runs: int) -> tuple[float, float | None]:
        """(workers' µs per run, the database's µs per run or None where it has no process
        of its own), from `start` until now."""
        assert self._start is not None, "start() first"
        workers_before, db_before = self._start
        workers_s = CpuSample.of(self.workers()).since(workers_before)
        if self.database is None:
            return 1e6 * workers_s / runs, None
        # The pids seen at the start and now: a pool may have opened a session in between,
        # whose time from its start is all spent in the phase.
        pids = set(self._db_pids) | set(await self.database())
        db_now = CpuSample.of(pids)
        new = {pid: 0.0 for pid in db_now.seconds if pid not in db_before.seconds}
        db_s = db_now.since(CpuSample({**db_before.seconds, **new}))
        return 1e6 * workers_s / runs, 1e6 * db_s / runs
