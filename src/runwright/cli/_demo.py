"""`runwright demo`: worker processes, a few hundred runs, a SIGKILL midway, a tally.

The workers it starts run this module's app (`runwright.cli._demo:app`): one job that
sleeps a while (WORK_S, scaled by a random factor in JITTER: no CPU work) and, at each
start, appends `run_id fence pid` to a ledger file (one per process, in
RUNWRIGHT_DEMO_LEDGER), so the tally can show which runs were started again after their
worker was killed, and that each still finished exactly once.

Every figure it prints is what it measured, and says of what: the runs in flight on the
killed worker are read from the store while that worker is stopped (SIGSTOP, then the
read, then SIGKILL), so none can start or end between the count and the kill; the
takeovers counted are of those runs; the throughput is stated beside the sleep that bounds it.

It writes in a temporary folder of its own (its ledger, and its SQLite database unless
given --url), which it names at start and removes at the end: nothing is left in the
folder it was run from.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..app import App
from ..engine._context import Context
from ..runs import Run, RunState

__all__ = ["demo_app", "run_demo"]

console = Console()
DEMO_DB = "runwright-demo.db"
APP_SPEC = "runwright.cli._demo:app"
WORK_S = 0.2  # what a run does: sleep WORK_S times a factor drawn from JITTER
JITTER = (0.5, 1.5)
CONCURRENCY = 8  # slots of each worker process
LEASE_S = 10
KILL_AT = 0.4  # the kill comes once this share of the runs has ended
POLL_S = 0.05  # how often the end is looked for: the elapsed time is this late at most


async def demo_job(ctx: Context, n: int, work_s: float = WORK_S) -> int:
    ledger = os.environ.get("RUNWRIGHT_DEMO_LEDGER")
    if ledger:
        with open(os.path.join(ledger, f"{os.getpid()}.log"), "a") as out:
            out.write(f"{ctx.run_id} {ctx.fence} {os.getpid()}\n")
    await asyncio.sleep(work_s * random.uniform(*JITTER))
    return n * n


def demo_app(url: str | None = None) -> App:
    """An App on `url` (else RUNWRIGHT_URL) with the demo's job registered."""
    app = App(url)
    app.task(retries=2)(demo_job)
    return app


@functools.cache
def _worker_app() -> App:
    return demo_app()


def __getattr__(name: str) -> App:
    """`app`, built on first use: importing this module for `runwright demo` reads no
    store URL; the workers it starts load `runwright.cli._demo:app`."""
    if name == "app":
        return _worker_app()
    raise AttributeError(name)


def run_demo(runs_count: int, workers: int, url: str | None) -> bool:
    work = Path(tempfile.mkdtemp(prefix="runwright-demo-"))
    try:
        ledger = work / "ledger"
        ledger.mkdir()
        if url is None:
            url = f"sqlite:///{work / DEMO_DB}"
        console.print(f"[bold]runwright demo[/] on {url}: {workers} worker processes, {runs_count} runs "
                      f"(its files in {work}, removed at the end)", highlight=False, soft_wrap=True)
        return _run(url, runs_count, workers, str(ledger))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(url: str, runs_count: int, workers: int, ledger: str) -> bool:
    env = {**os.environ, "RUNWRIGHT_URL": url, "RUNWRIGHT_DEMO_LEDGER": ledger,
           "RUNWRIGHT_LOG_LEVEL": "WARNING"}
    asyncio.run(_migrate(url))  # before the workers, so they do not race to create the file
    procs = [subprocess.Popen([sys.executable, "-m", "runwright", "worker", APP_SPEC,
                               "--concurrency", str(CONCURRENCY), "--lease-s", str(LEASE_S)], env=env)
             for _ in range(workers)]
    try:
        return asyncio.run(_drive(url, runs_count, procs, ledger))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _migrate(url: str) -> None:
    async with App(url):
        pass


class Kill:
    """What the kill met: the worker, and the runs in flight on it (running, claimed by it)
    and on every worker, as the store held them while it was stopped."""

    def __init__(self, pid: int, in_flight: list[int], running: int) -> None:
        self.pid = pid
        self.in_flight = in_flight
        self.running = running


async def _kill(app: App, victim: subprocess.Popen[bytes], force: bool) -> Kill | None:
    """Stop `victim`, read what it holds, and SIGKILL it; when it holds no run (and not
    `force`), let it go on instead and return None (a kill of an idle worker shows nothing)."""
    here = socket.gethostname()
    victim.send_signal(signal.SIGSTOP)
    try:
        ours = [w.id for w in await app.list_workers()
                if w.pid == victim.pid and w.host.split("~", 1)[0] == here]
        running = await app.list_runs(states=[RunState.RUNNING], limit=1_000_000)
        in_flight = sorted(r.id for r in running if r.owner in ours)
    except BaseException:
        victim.send_signal(signal.SIGCONT)
        raise
    if not in_flight and not force:
        victim.send_signal(signal.SIGCONT)
        return None
    victim.send_signal(signal.SIGKILL)
    return Kill(victim.pid, in_flight, len(running))


async def _drive(url: str, runs_count: int, procs: list[subprocess.Popen[bytes]], ledger: str) -> bool:
    async with demo_app(url) as app:
        started = time.perf_counter()
        handles = []
        columns = (TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            submitting = progress.add_task("submitted", total=runs_count)
            for start in range(0, runs_count, 25):
                chunk = [{"n": n} for n in range(start, min(start + 25, runs_count))]
                handles += await app.submit_many("demo_job", chunk)
                progress.update(submitting, completed=len(handles))
            finishing = progress.add_task("finished", total=runs_count)
            victim = procs[len(procs) // 2]
            kill: Kill | None = None
            while True:
                counts = await app.count_by_state()
                done = sum(counts.get(s.value, 0) for s in (RunState.SUCCEEDED, RunState.FAILED,
                                                             RunState.DEAD, RunState.CANCELLED))
                progress.update(finishing, completed=done)
                if kill is None and done >= runs_count * KILL_AT:
                    # Killed holding runs, unless the runs are nearly all done before it holds one.
                    kill = await _kill(app, victim, force=done >= runs_count * 0.9 or done == runs_count)
                    if kill is not None:
                        progress.console.print(
                            f"[bold red]SIGKILL[/] worker pid {kill.pid} with {len(kill.in_flight)} runs in "
                            f"flight on it ({kill.running} running on all {len(procs)} workers)")
                if done >= runs_count:
                    break
                await asyncio.sleep(POLL_S)
        elapsed = time.perf_counter() - started
        runs = await app.read_runs([h.id for h in handles])
    assert kill is not None  # forced at the end at the latest
    return _report(runs, ledger, elapsed, kill, len(procs))


def _report(runs: list[Run], ledger: str, elapsed: float, kill: Kill, workers: int) -> bool:
    starts: Counter[int] = Counter()
    starts_by_pid: Counter[int] = Counter()
    for log in Path(ledger).glob("*.log"):
        for line in log.read_text().splitlines():
            run_id, _fence, pid = map(int, line.split())
            starts[run_id] += 1
            starts_by_pid[pid] += 1
    by_id = {r.id: r for r in runs}
    succeeded = [r for r in runs if r.state is RunState.SUCCEEDED]
    wrong = [r for r in succeeded if r.value() != r.arguments()["n"] ** 2]
    # Taken over: of the runs in flight on the killed worker, those another worker claimed
    # back (a takeover counts on the run as a recovery) and finished.
    taken_over = [i for i in kill.in_flight
                  if by_id[i].recoveries > 0 and by_id[i].state is RunState.SUCCEEDED]
    restarted = [run_id for run_id, count in starts.items() if count > 1]
    low, high = (WORK_S * f for f in JITTER)
    slots = workers * CONCURRENCY
    table = Table(title=f"{len(runs)} runs, {workers} worker processes, one SIGKILLed", show_header=False)
    rows = [
        ("runs submitted", len(runs)),
        ("finished succeeded (one fenced finish each)", len(succeeded)),
        ("results wrong", len(wrong)),
        ("not finished", len(runs) - len(succeeded)),
        (f"in flight on the killed worker (pid {kill.pid}) at the kill", len(kill.in_flight)),
        ("of them taken over by another worker, and finished", len(taken_over)),
        ("runs started again after the kill (taken over; each still finished once)", len(restarted)),
        (f"starts by the killed worker (pid {kill.pid})", starts_by_pid.get(kill.pid, 0)),
        ("throughput, first submission to last end (the kill included)",
         f"{len(runs) / elapsed:.0f} runs/s over {elapsed:.1f} s, each run sleeping {low:g}-{high:g} s"),
        (f"the most such sleeps allow on {slots} slots ({workers} x {CONCURRENCY})",
         f"{slots / WORK_S:.0f} runs/s (a run does no CPU work)"),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    ok = len(succeeded) == len(runs) and not wrong and len(taken_over) == len(kill.in_flight)
    console.print("[bold green]OK: every run finished, exactly once[/]" if ok else "[bold red]FAILED[/]")
    return ok
