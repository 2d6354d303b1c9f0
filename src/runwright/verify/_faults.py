"""The seeded fault schedule and the injectors that apply it while the workload drains.

`schedule` is a pure function of the seed and the options: one `random.Random` per kind
of fault decides when each lands (a period, jittered 0.5x..1.5x) and which worker slot it
hits, so the same seed makes the same schedule. The injectors:

- kill: SIGKILL of the slot's worker, restarted at once (another takes over its runs);
- stall: SIGSTOP past the lease, then SIGCONT (it wakes as a zombie: its writes must be
  refused). On SQLite the stop lands outside a write transaction, or every worker would
  wait on the stopped one's lock, which no lease can help;
- blip: the workers' database connections dropped: PostgreSQL `pg_terminate_backend` of
  the sessions named `runwright:<schema>:<pid>`, Redis `CLIENT KILL` of the clients named
  `runwright:<namespace>:<pid>`; SQLite has no connections to cut, so its blip is a writer
  killed inside its write transaction (the file must roll it back).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Awaitable, Callable

from ..store.sqlite._liveness import write_lock_free
from ._place import Place
from ._workers import Pool

__all__ = ["KINDS", "Fault", "Injector", "schedule", "stall_s"]

KINDS = ("kill", "stall", "blip")
LOCK_PROBE_S = 0.3  # a running worker holds the SQLite write lock far shorter than this
TRIES = 30
WRITER_TRIES = 200
UP_WAIT_S = 60.0
STALL_LEASES, STALL_EXTRA_S = 1.5, 0.5  # a stall lasts this many leases and this much more


def stall_s(lease_s: float) -> float:
    """How long a stall lasts: past the stalled worker's lease, so its runs are taken over."""
    return lease_s * STALL_LEASES + STALL_EXTRA_S


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float  # seconds after the fault phase began
    kind: str
    slot: int


def schedule(seed: int, workers: int, every: dict[str, float], horizon_s: float) -> list[Fault]:
    """Every fault up to `horizon_s`, in time order; a kind whose period is 0 is off."""
    faults = []
    for kind in KINDS:
        period = every.get(kind, 0.0)
        if period <= 0:
            continue
        rng = random.Random(f"{seed}:{kind}")
        at = 0.0
        while True:
            at += period * rng.uniform(0.5, 1.5)
            if at > horizon_s:
                break
            faults.append(Fault(round(at, 3), kind, rng.randrange(workers)))
    return sorted(faults, key=lambda f: (f.at_s, KINDS.index(f.kind)))


class CutRefused(Exception):
    """The server refused the connection a blip cuts from: the blip did not land."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"a blip's own connection was refused: {type(error).__name__}: {error}")


class Injector:
    """Applies faults to the pool's workers; `counts` says what was done."""

    def __init__(self, place: Place, pool: Pool, stall_s: float,
                 registered: Callable[[], Awaitable[set[int]]],
                 busy: Callable[[], Awaitable[set[int]]]) -> None:
        self.place = place
        self.pool = pool
        self.stall_s = stall_s
        self.registered = registered  # the pids of the workers registered in the store
        self.busy = busy  # the pids of the workers that hold a running run
        self.counts: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()  # why -> how many faults did not land
        self.applied: list[dict[str, object]] = []
        self._started = asyncio.get_running_loop().time()
        self._wakes: set[asyncio.Task[None]] = set()
        self._turns: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def apply(self, fault: Fault) -> None:
        """Apply one fault (faults run concurrently, so that one waiting for its worker
        delays no other; those on one slot take turns)."""
        slot = fault.slot
        if fault.kind != "blip" or self.place.backend == "sqlite":
            slot = await self._target(slot)
        else:
            await self._all_up()
        async with self._turns[slot]:
            await self._apply(fault.kind, slot)

    async def _apply(self, kind: str, slot: int) -> None:
        entry: dict[str, object] = {"at_s": round(asyncio.get_running_loop().time() - self._started, 3),
                                    "kind": kind, "slot": slot}
        self.applied.append(entry)
        if kind == "blip" and self.place.backend != "sqlite":
            try:
                cut = await (self._cut_postgres() if self.place.backend == "postgres" else self._cut_redis())
            except CutRefused as exc:
                # The server would not let verify in to cut (at its connection limit, say):
                # this blip did not land. Said in the report, not as a task's traceback.
                self.applied.remove(entry)
                self.skipped[str(exc)] += 1
                return
            self.counts["blips"] += 1
            self.counts["connections_cut"] += cut
        elif kind == "kill":
            self.pool.kill(slot)
            self.counts["kills"] += 1
        elif kind == "stall":
            await self._stall(slot)
        else:  # a blip on SQLite
            await self._kill_a_writer(slot)

    async def _all_up(self) -> None:
        """Until at most one worker is still starting: a cut that lands while a worker
        starts can make it give up starting, and with cuts every few seconds on a loaded
        machine none might ever get going (while kills go on, all are rarely up at once)."""
        deadline = asyncio.get_running_loop().time() + UP_WAIT_S
        while asyncio.get_running_loop().time() < deadline:
            up = await self.registered()
            if sum(proc.pid not in up for proc in self.pool.procs) <= 1:
                return
            await asyncio.sleep(0.1)

    async def _target(self, slot: int) -> int:
        """The scheduled slot once its worker has registered: a process killed while it
        starts holds no run, and killing the new ones again and again would leave no
        worker to take anything over. If it is still starting after a lease, the next
        slot whose worker is up takes the fault (`applied` shows where each landed)."""
        loop = asyncio.get_running_loop()
        soon, deadline = loop.time() + self.pool.lease_s, loop.time() + UP_WAIT_S
        size = len(self.pool.procs)
        while True:
            up = await self.registered()
            if self.pool.pid(slot) in up:
                return await self._holding(slot)
            if loop.time() > soon:
                for other in (slot + step for step in range(1, size)):
                    if self.pool.pid(other % size) in up:
                        return other % size
            if loop.time() > deadline:
                return slot
            await asyncio.sleep(0.1)

    async def _holding(self, slot: int) -> int:
        """The slot, if its worker holds a run; else the next slot whose worker does: a
        kill or a stall of a worker that holds nothing takes nothing over, and a short
        run whose faults all landed so would measure no takeover at all."""
        busy = await self.busy()
        size = len(self.pool.procs)
        return next((other % size for other in range(slot, slot + size)
                     if self.pool.pid(other % size) in busy), slot)

    async def _stall(self, slot: int) -> None:
        if slot in self.pool.stopped:
            return  # already stopped: this one is not counted
        if not await self._stop_outside_a_write(slot):
            return
        self.counts["stalls"] += 1
        pid = self.pool.pid(slot)

        async def wake() -> None:
            await asyncio.sleep(self.stall_s)
            self.pool.resume(slot, pid)

        task = asyncio.ensure_future(wake())
        self._wakes.add(task)
        task.add_done_callback(self._wakes.discard)

    async def _stop_outside_a_write(self, slot: int) -> bool:
        for _ in range(TRIES):
            self.pool.stop(slot)
            if self.place.backend != "sqlite" or await self._write_lock_free():
                return True
            self.pool.resume(slot)  # it holds the lock: let it run on, and try again
            await asyncio.sleep(0.02)
        return False

    async def _kill_a_writer(self, slot: int) -> None:
        """SIGSTOP the worker; if it holds the write lock now, SIGKILL it there."""
        # A stalled worker was stopped outside a write: a lock held now is another's.
        for _ in range(0 if slot in self.pool.stopped else WRITER_TRIES):
            self.pool.stop(slot)
            if not await self._write_lock_free():
                self.pool.kill(slot)
                self.counts["blips"] += 1
                self.counts["writers_killed"] += 1
                return
            self.pool.resume(slot)
            await asyncio.sleep(0.002)
        self.pool.kill(slot)  # never caught inside a write: a kill all the same
        self.counts["blips"] += 1

    async def _write_lock_free(self) -> bool:
        return await asyncio.to_thread(write_lock_free, self.place.name, LOCK_PROBE_S)

    async def _cut_postgres(self) -> int:
        import asyncpg

        try:
            conn = await asyncpg.connect(self.place.admin_url)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise CutRefused(exc) from exc
        try:
            cut = await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE starts_with(application_name, $1) AND pid <> pg_backend_pid()",
                f"runwright:{self.place.name}:")
        finally:
            await conn.close()
        return int(cut or 0)

    async def _cut_redis(self) -> int:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(self.place.admin_url, decode_responses=True)
        try:
            name = f"runwright:{self.place.name}:"  # then each process's pid
            cut = 0
            try:
                listed = await client.client_list()
            except (OSError, aioredis.RedisError) as exc:
                raise CutRefused(exc) from exc
            for entry in listed:
                if entry.get("name", "").startswith(name):
                    cut += int(await client.client_kill_filter(_id=entry["id"]) or 0)
        finally:
            await client.aclose()
        return cut

    def close(self) -> None:
        """Wake every stopped worker (before they are ended or counted)."""
        for task in self._wakes:
            task.cancel()
        for slot in list(self.pool.stopped):
            self.pool.resume(slot)
