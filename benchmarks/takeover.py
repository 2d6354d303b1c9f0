"""Takeover benchmark: how long PostgreSQL takes to give a SIGKILLed worker's run to another
worker, and what cut sessions (a blip) cost, on worker processes.

    cd /work/main && .venv/bin/python -m benchmarks.takeover [--kills 20] [--blips 20]

Kills: two workers; a long run starts on one of them, which is SIGKILLed (and reaped, as a
supervisor would); the takeover is the time from the kill to the run's next `started`
event, both read on the database's clock. Each kill waits a random 1.5-2.5 s after the
workers are up, so that it lands at a random point of the survivor's poll and its watch
has chosen whom to watch. Blips: every session of the worker that runs a long run is cut
(`pg_terminate_backend`, as a restarted database or a proxy would) --blips times; the
worker lives on, so a takeover (the run's fence moving) is a fault: their count must be 0.
Beside it, how long the worker's liveness mark stayed missing after each cut (the grace a
rescuer gives a worker that might come back must outlast it). It prints figures; it
asserts nothing.

    .venv/bin/python -m benchmarks.takeover --layouts here,alone,sibling

--layouts says where the workers run, each layout measured in turn (kills, then blips):
- here (the default): two worker processes of this machine. A rescuer judges a dead
  worker of its own machine by its pid, at once, with no grace.
- alone: two workers, each alone in a pid namespace of its own, as on two machines: no
  rescuer can judge the victim by its pid, so it is dead only once its mark has stayed
  missing MISSING_GRACE_S (the worst case of a real death).
- sibling: two pid namespaces, each running `runwright worker -p 2` (a supervisor and two
  worker processes), as two machines of two processes: the victim's sibling can judge its
  pid, the other machine's two cannot. The supervisor starts a new worker after each kill.
Beside the times, how many takeovers a worker of the victim's own machine made (read from
the workers' logs: who logged "run taken over").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import asyncpg

import runwright as rw
from runwright.store._liveness import runs_on
from runwright.store._params import EventListParams, WorkerInfo

from . import apart, common
from .common import BenchError, Workers, p99, say

NAME = "takeover"  # the workers load benchmarks.takeover:app
POLL_S = 0.005
LONG_S = 600.0  # the long run outlives every measurement (cancelled at the end)
BLIP_GAP_S = (0.6, 1.2)  # between two cuts: the mark is back well before the next
TAKEN_OVER = re.compile(r"run taken over from a lost worker.* run_id=(\d+)\b.* worker=(\d+)\b")

COUNTS = [
    common.Count("--kills", 20, "SIGKILLs timed (p50 and p99 printed)", at_least=2),
    common.Count("--blips", 20, "cuts of every session of a worker running a run", at_least=1),
]


@dataclass(frozen=True)
class Layout:
    """Where the workers run: `namespaces` pid namespaces of their own (0: this one) of
    `processes` worker processes each."""

    name: str
    namespaces: int
    processes: int

    @property
    def workers(self) -> int:
        return 2 if not self.namespaces else self.namespaces * self.processes


LAYOUTS = {layout.name: layout for layout in
           (Layout("here", 0, 1), Layout("alone", 2, 1), Layout("sibling", 2, 2))}


async def long_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def with_tasks(target: rw.App) -> rw.App:
    target.task(long_sleep)
    return target


app = with_tasks(rw.App())  # the workers set RUNWRIGHT_URL before importing us


@dataclass
class Kill:
    run_id: int
    victim: WorkerInfo
    hosts: dict[int, str]  # the host of each worker registered at the kill, by id
    seconds: float


@dataclass
class Figures:
    backend: str = "postgres"
    layout: str = "here"
    takeovers_s: list[float] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    rescuers: dict[int, int] = field(default_factory=dict)  # run id -> the worker that took it over
    blip_takeovers: int | None = None
    mark_back_s: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.backend} {self.layout}"

    def by_own_machine(self) -> list[bool | None]:
        """For each kill: was it taken over by a worker of the victim's machine (None:
        no "run taken over" line names its run)?"""
        seen = []
        for kill in self.kills:
            rescuer = self.rescuers.get(kill.run_id)
            seen.append(None if rescuer is None else kill.hosts.get(rescuer) == kill.victim.host)
        return seen


def make_workers(layout: Layout, workers: Workers) -> Workers:
    """The workers of `layout`, as `common.backend_session` made them for this machine."""
    if not layout.namespaces:
        return workers
    return apart.ApartWorkers(workers.app_spec, workers.url, workers.concurrency, workers.log_dir,
                              processes=layout.processes)


def top_up(layout: Layout, workers: Workers) -> None:
    """Start what the layout lacks: a worker, or a namespace (a namespace of -p 2 keeps
    its two workers itself: its supervisor starts a new one after a kill)."""
    workers.start((layout.namespaces or layout.workers) - len(workers.procs))


def lives(layout: Layout, worker: WorkerInfo, workers: Workers) -> bool:
    if not layout.namespaces:
        return worker.pid in {proc.pid for proc in workers.procs}
    try:
        with open(f"/proc/{apart.host_pid(worker.host, worker.pid)}/stat", "rb") as stat:
            return runs_on(stat.read())  # not a zombie its supervisor has yet to reap
    except (BenchError, OSError):
        return False


async def running_on_some_worker(bench: rw.App) -> tuple[rw.Run, WorkerInfo, dict[int, str]]:
    """Submit a long run; once it runs: the run, its worker and the host of each worker."""
    handle = await bench.submit("long_sleep", seconds=LONG_S)
    deadline = time.monotonic() + 30
    while True:
        run = await bench.store.run_get(handle.id)
        if run is not None and run.state is rw.RunState.RUNNING and run.owner is not None:
            registered = {w.id: w for w in await bench.store.worker_list()}
            if run.owner in registered:
                return run, registered[run.owner], {w.id: w.host for w in registered.values()}
        if time.monotonic() > deadline:
            raise BenchError(f"the long run did not start: {run}")
        await asyncio.sleep(POLL_S)


async def wait_workers(bench: rw.App, layout: Layout, workers: Workers) -> None:
    """Until exactly the layout's live workers are registered (a dead one is removed by
    rescue)."""
    deadline = time.monotonic() + 30
    while True:
        registered = await bench.store.worker_list()
        if len(registered) == layout.workers and all(lives(layout, w, workers) for w in registered):
            return
        if time.monotonic() > deadline:
            raise BenchError(f"{layout.workers} live workers did not register: {registered}")
        await asyncio.sleep(0.02)


def kill(layout: Layout, workers: Workers, victim: WorkerInfo) -> None:
    """SIGKILL the victim (reaped as a supervisor would: by ours, its namespace's launcher
    or its -p supervisor)."""
    if not layout.namespaces:
        workers.kill(workers.by_pid(victim.pid))
    else:
        assert isinstance(workers, apart.ApartWorkers)
        workers.kill_worker(apart.host_pid(victim.host, victim.pid))


# Who holds or waits for a worker's mark, and what that session is doing.
MARK_SESSIONS = """
SELECT l.pid, l.granted, a.application_name, a.state, a.wait_event_type, a.wait_event,
       round(extract(epoch FROM clock_timestamp() - a.backend_start)::numeric, 3) AS age_s,
       round(extract(epoch FROM clock_timestamp() - a.state_change)::numeric, 3) AS in_state_s,
       left(a.query, 100) AS query
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.classid = $1::oid AND l.objid::bigint = $2 AND l.objsubid = 2
"""
SLOW_S = 2.0  # a takeover slower than this is looked into: who keeps the victim's mark
NOTED_S = 0.25  # a kill taken over slower than this is noted (by whom, of which machine)
NOTED_APART_S = 0.6  # the same where the grace applies (0.3 s, and a look)


async def restarted_at(bench: rw.App, run: rw.Run, victim: WorkerInfo, admin: asyncpg.Connection,
                       figures: Figures) -> float:
    """The database's time of the run's next `started` event (another worker took it).
    Past SLOW_S, the sessions that hold or wait for the victim's mark become a note."""
    began = time.monotonic()
    looked = False
    while True:
        now = await bench.store.run_get(run.id)
        if now is not None and now.fence > run.fence and now.state is rw.RunState.RUNNING:
            events = await bench.store.event_list(EventListParams(run.id))
            return [e.at for e in events if e.kind == "started"][-1]
        if not looked and time.monotonic() - began > SLOW_S:
            looked = True
            sessions = await admin.fetch(MARK_SESSIONS, bench.store.lock_namespace,  # type: ignore[attr-defined]
                                         victim.id)
            figures.notes.append(f"run {run.id} not taken over {SLOW_S:g} s after worker {victim.id} "
                                 f"(pid {victim.pid}) was killed; its mark's sessions: "
                                 f"{[dict(row) for row in sessions]}")
            say(figures.where, figures.notes[-1])
        if time.monotonic() - began > 30:
            raise BenchError(f"run {run.id} was not taken over in 30 s: {now}")
        await asyncio.sleep(POLL_S)


async def measure_kills(bench: rw.App, layout: Layout, workers: Workers, admin: asyncpg.Connection,
                        kills: int, figures: Figures) -> None:
    for _ in range(kills):
        top_up(layout, workers)
        await wait_workers(bench, layout, workers)
        await asyncio.sleep(random.uniform(1.5, 2.5))
        run, victim, hosts = await running_on_some_worker(bench)
        killed_at = float(await admin.fetchval("SELECT extract(epoch FROM clock_timestamp())"))
        kill(layout, workers, victim)
        taken_s = await restarted_at(bench, run, victim, admin, figures) - killed_at
        figures.takeovers_s.append(taken_s)
        figures.kills.append(Kill(run.id, victim, hosts, taken_s))
        await bench.cancel(run.id)
    taken = figures.takeovers_s
    say(figures.where, f"takeover after SIGKILL over {len(taken)} kills: p50 "
                       f"{statistics.median(taken):.3f} s, p99 {p99(taken):.3f} s, max {max(taken):.3f} s")


def read_rescuers(log_dir: Path) -> dict[int, int]:
    """Run id -> the worker that logged taking it over, from every worker log."""
    rescuers = {}
    for path in sorted(log_dir.glob("worker-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            found = TAKEN_OVER.search(line)
            if found:
                rescuers[int(found.group(1))] = int(found.group(2))
    return rescuers


async def measure_blips(bench: rw.App, layout: Layout, workers: Workers, admin: asyncpg.Connection,
                        schema: str, blips: int, figures: Figures) -> None:
    top_up(layout, workers)
    await wait_workers(bench, layout, workers)
    await asyncio.sleep(2.0)
    run, victim, _ = await running_on_some_worker(bench)
    namespace = bench.store.lock_namespace  # type: ignore[attr-defined]
    # Its sessions are named after its pid in its own namespace. The session of its own
    # that holds its mark: a rescuer's waiter holds it too, for an instant, once it drops.
    name = f"runwright:{schema}:{victim.pid}"
    holder = ("SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
              " WHERE l.locktype = 'advisory' AND l.classid = $1::oid AND l.objid::bigint = $2"
              " AND l.objsubid = 2 AND l.granted AND a.application_name = $3")
    for _ in range(blips):
        await asyncio.sleep(random.uniform(*BLIP_GAP_S))
        before = await admin.fetchval(holder, namespace, victim.id, name)
        cut = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
            name)
        began = time.monotonic()
        if not cut or before is None:
            raise BenchError(f"no session of worker {victim.pid} to cut, or none holding its mark")
        # Back once another session of its own holds it: a look that found it held by the
        # cut session (not ended yet) timed it missing for 0 ms. From the cut's request, so
        # an upper bound (it includes the cut session's own end).
        while await admin.fetchval(holder, namespace, victim.id, name) in (None, before):
            if time.monotonic() - began > 30:
                raise BenchError("the worker did not take its mark again in 30 s")
            await asyncio.sleep(0.002)
        figures.mark_back_s.append(time.monotonic() - began)
    await asyncio.sleep(2.0)  # past every rescuer's grace and poll
    after = await bench.store.run_get(run.id)
    assert after is not None
    figures.blip_takeovers = after.fence - run.fence
    back = figures.mark_back_s
    say(figures.where, f"{blips} blips: {figures.blip_takeovers} takeovers; the mark was missing "
                       f"p50 {statistics.median(back) * 1000:.0f} ms, max {max(back) * 1000:.0f} ms")
    await bench.cancel(run.id)


async def bench_layout(layout: Layout, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures("postgres", layout.name)
    tmp.mkdir()
    async with common.backend_session(figures, NAME, with_tasks, 4, tmp, args.pg_url) as session:
        if layout.namespaces and (why := apart.refusal()) is not None:
            raise BenchError(f"layout {layout.name}: {why}")
        session.workers = make_workers(layout, session.workers)
        figures.notes.append(f"load average at the start: {_load()}")
        await session.bench.open()
        admin = await asyncpg.connect(args.pg_url)
        try:
            await measure_kills(session.bench, layout, session.workers, admin, args.kills, figures)
            await measure_blips(session.bench, layout, session.workers, admin, session.schema,
                                args.blips, figures)
        finally:
            await admin.close()
            figures.notes.append(f"load average at the end: {_load()}")
    figures.rescuers = read_rescuers(tmp / f"logs-{figures.backend}")
    # Where no worker of the victim's machine can judge it (alone), the grace is the figure.
    slow_s = NOTED_APART_S if layout.namespaces and layout.processes == 1 else NOTED_S
    for kill, own in zip(figures.kills, figures.by_own_machine()):
        if kill.seconds > slow_s or own is False and layout.processes > 1:
            rescuer = figures.rescuers.get(kill.run_id)
            figures.notes.append(
                f"run {kill.run_id}: {kill.seconds:.3f} s; victim {kill.victim.id} {kill.victim.host} "
                f"pid {kill.victim.pid}; taken over by {rescuer} {kill.hosts.get(rescuer or 0, '?')}; "
                f"registered then: {kill.hosts}")
    return figures


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def seconds(values: list[float], pick: str) -> str:
    if len(values) < 2:  # a phase stopped early: no percentile of fewer
        return "-" if not values else f"{values[0]:.3f} s (1 kill)"
    if pick == "max":
        return f"{max(values):.3f} s"
    return f"{(statistics.median(values) if pick == 'p50' else p99(values)):.3f} s"


def own_machine(f: Figures) -> str:
    seen = f.by_own_machine()
    if not seen:
        return "-"
    mine = [k.seconds for k, by in zip(f.kills, seen) if by]
    others = [k.seconds for k, by in zip(f.kills, seen) if by is False]
    unknown = seen.count(None)
    text = f"{len(mine)}/{len(seen)}"
    if mine and others:
        text += f" (p50 {statistics.median(mine):.3f} s; others' {statistics.median(others):.3f} s)"
    return text + (f", {unknown} unread" if unknown else "")


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    rows = [
        ("takeover after SIGKILL, p50", lambda f: seconds(f.takeovers_s, "p50")),
        ("takeover after SIGKILL, p99", lambda f: seconds(f.takeovers_s, "p99")),
        ("takeover after SIGKILL, max", lambda f: seconds(f.takeovers_s, "max")),
        ("taken over by the victim's machine", own_machine),
        (f"takeovers in {args.blips} blips", lambda f: "-" if f.blip_takeovers is None
         else str(f.blip_takeovers)),
        ("mark missing after a cut, p50", lambda f: f"{statistics.median(f.mark_back_s) * 1000:.0f} ms"
         if f.mark_back_s else "-"),
        ("mark missing after a cut, max", lambda f: f"{max(f.mark_back_s) * 1000:.0f} ms"
         if f.mark_back_s else "-"),
    ]
    columns = [replace(f, backend=f.where) for f in all_figures]
    return common.render_table(f"kills {args.kills}", rows, columns)


async def bench_layouts(args: argparse.Namespace) -> None:
    """Each layout in turn (not to compete for the machine), then the table."""
    tmp = Path(tempfile.mkdtemp(prefix="runwright-bench-"))
    try:
        all_figures = [await bench_layout(LAYOUTS[name], args, tmp / name) for name in args.layouts]
    finally:
        if args.keep_logs:  # the workers' logs, a folder a layout, for a slow or failed kill
            shutil.copytree(tmp, args.keep_logs, dirs_exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(summary(all_figures, args))


def layouts_of(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = set(names) - set(LAYOUTS)
    if unknown or not names:
        raise SystemExit(f"--layouts: {', '.join(sorted(unknown)) or 'none given'}; "
                         f"choose among {', '.join(LAYOUTS)}")
    return names


if __name__ == "__main__":
    args = common.parse_benchmark_args(__doc__, COUNTS, backends=False, extra=[
        ("--layouts", "here", f"comma-separated, each measured in turn: {', '.join(LAYOUTS)}"),
        ("--keep-logs", "", "copy the workers' logs into this folder at the end")])
    args.layouts = layouts_of(args.layouts)
    common.run_main(bench_layouts(args))
