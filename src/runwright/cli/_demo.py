"""`runwright demo`: worker processes, a few hundred runs, a SIGKILL midway, a tally.

The workers it starts run this module's app (`runwright.cli._demo:app`): one job that takes
a little while and, at each start, appends `run_id fence pid` to a ledger file (one per
process, in RUNWRIGHT_DEMO_LEDGER), so the tally can show which runs were started again
after their worker was killed, and that each still finished exactly once.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import signal
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


async def demo_job(ctx: Context, n: int, work_s: float = 0.2) -> int:
    ledger = os.environ.get("RUNWRIGHT_DEMO_LEDGER")
    if ledger:
        with open(os.path.join(ledger, f"{os.getpid()}.log"), "a") as out:
            out.write(f"{ctx.run_id} {ctx.fence} {os.getpid()}\n")
    await asyncio.sleep(work_s * random.uniform(0.5, 1.5))
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
    if url is None:
        for suffix in ("", "-wal", "-shm"):
            Path(DEMO_DB + suffix).unlink(missing_ok=True)
        url = f"sqlite:///./{DEMO_DB}"
    ledger = tempfile.mkdtemp(prefix="runwright-demo-")
    env = {**os.environ, "RUNWRIGHT_URL": url, "RUNWRIGHT_DEMO_LEDGER": ledger,
           "RUNWRIGHT_LOG_LEVEL": "WARNING"}
    console.print(f"[bold]runwright demo[/] on {url}: {workers} worker processes, {runs_count} runs")
    asyncio.run(_migrate(url))  # before the workers, so they do not race to create the file
    procs = [subprocess.Popen([sys.executable, "-m", "runwright", "worker", APP_SPEC,
                               "--concurrency", "8", "--lease-s", "10"], env=env)
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


async def _migrate(url: str) -> None:
    async with App(url):
        pass


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
            killed = False
            while True:
                counts = await app.count_by_state()
                done = sum(counts.get(s.value, 0) for s in (RunState.SUCCEEDED, RunState.FAILED,
                                                             RunState.DEAD, RunState.CANCELLED))
                progress.update(finishing, completed=done)
                if not killed and done >= runs_count * 0.4:
                    victim.send_signal(signal.SIGKILL)
                    killed = True
                    progress.console.print(f"[bold red]SIGKILL[/] worker pid {victim.pid} "
                                           f"with {counts.get('running', 0)} runs in flight")
                if done >= runs_count:
                    break
                await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        runs = await app.read_runs([h.id for h in handles])
    return _report(runs, ledger, elapsed, victim.pid)


def _report(runs: list[Run], ledger: str, elapsed: float, victim_pid: int) -> bool:
    starts: Counter[int] = Counter()
    starts_by_pid: Counter[int] = Counter()
    for log in Path(ledger).glob("*.log"):
        for line in log.read_text().splitlines():
            run_id, _fence, pid = map(int, line.split())
            starts[run_id] += 1
            starts_by_pid[pid] += 1
    succeeded = [r for r in runs if r.state is RunState.SUCCEEDED]
    wrong = [r for r in succeeded if r.value() != r.arguments()["n"] ** 2]
    taken_over = [r for r in runs if r.recoveries > 0]
    restarted = [run_id for run_id, count in starts.items() if count > 1]
    table = Table(title="every run finished exactly once", show_header=False)
    rows = [
        ("runs submitted", len(runs)),
        ("finished succeeded (one fenced finish each)", len(succeeded)),
        ("results wrong", len(wrong)),
        ("not finished", len(runs) - len(succeeded)),
        ("taken over from the killed worker", len(taken_over)),
        ("started again after the kill", len(restarted)),
        (f"starts by the killed worker (pid {victim_pid})", starts_by_pid.get(victim_pid, 0)),
        ("throughput", f"{len(runs) / elapsed:.0f} runs/s over {elapsed:.1f} s"),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    ok = len(succeeded) == len(runs) and not wrong
    console.print("[bold green]OK[/]" if ok else "[bold red]FAILED[/]")
    return ok
