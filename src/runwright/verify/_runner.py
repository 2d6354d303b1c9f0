"""`runwright verify`'s run: its own place and workers, a fault-free baseline phase, then
the fault phase, where the seeded schedule hits the workers while the workload drains,
then the checks over the ledger and the store. Whatever happens (an error, Ctrl-C,
SIGTERM), the workers are ended and the place and the ledger removed."""

from __future__ import annotations

import asyncio
import math
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Sequence, TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..app import App
from ..core._journal import Event
from ..core._waiting import halt
from ..errors import InvalidTransition, StoreError
from ..runs import TERMINAL_STATES, Run, RunState
from ._checks import Findings, Ledger, RunData, check, children_of, percentile, throughput
from ._faults import Fault, Injector, schedule, stall_s
from ._place import Place, place_for
from ._workers import Pool
from ._workload import RUN_TASK, verify_app

__all__ = ["Options", "Outcome", "Submitted", "VerifyAborted", "run_verify"]

T = TypeVar("T")
CANCEL_SHARE = 0.05  # runs verify cancels while they drain
SLEEP_SHARE = 0.2  # runs with a durable sleep
CHILD_SHARE = 0.2  # runs that start a child and wait for it
SLEEP_S = 0.3
POLL_S = 0.25
SPREAD_TICK_S = 0.5
PLACE_WORDS = {"postgres": "schema", "redis": "namespace", "sqlite": "file"}
SPREAD = 2.0  # the fault phase's submissions last this many times the longest fault period
CHUNK = 500
READ_AT_ONCE = 16


class VerifyAborted(Exception):
    """Verify could not get going (its workers did not start): nothing was checked."""


@dataclass(frozen=True, slots=True)
class Options:
    url: str | None  # None: the default store's (sqlite:///./runwright.db)
    workers: int = 5
    runs: int = 10000
    steps: int = 3
    kill_every_s: float = 2.0
    stall_every_s: float = 10.0
    blip_every_s: float = 5.0
    seed: int = 0
    lease_s: float = 2.0
    timeout_s: float = 600.0  # the fault phase gives up draining after this
    fleet: bool = False  # the running fleet's workers, on a queue of this session's
    app_version: str = "0.0.0"  # --fleet: the fleet's app version (its major names the fleet)


@dataclass
class Outcome:
    report: dict[str, Any]
    findings: Findings

    @property
    def ok(self) -> bool:
        return self.findings.ok


async def _patient(call: Callable[[], Awaitable[T]], tries: int = 50) -> T:
    """Verify's own reads ride the connections that the blips cut: try again."""
    for attempt in range(tries):
        try:
            return await call()
        except (StoreError, OSError):
            if attempt == tries - 1:
                raise
            await asyncio.sleep(0.2)
    raise AssertionError("unreachable")


def findings_summary(found: Findings, base: float | None, faulted: float | None, applied: Any,
                     more_examples: Sequence[tuple[str, Sequence[Any]]] = ()) -> dict[str, Any]:
    """The report's parts that the local and the fleet mode share: takeovers, throughput
    with and without faults, steps, the faults applied, and up to five examples of each
    violation found (and of `more_examples`)."""
    examples: list[tuple[str, Sequence[Any]]] = [
        ("lost", found.lost), ("failed", found.failed), ("steps_reexecuted", found.steps_reexecuted),
        ("at_most_once_violations", found.at_most_once), ("zombie_writes_durable", found.zombie_writes),
        ("stream_gaps_or_repeats", found.stream_faults), *more_examples]
    return {
        "takeover_s": {"count": len(found.takeovers_s), "p50": percentile(found.takeovers_s, 50),
                       "p99": percentile(found.takeovers_s, 99)},
        "throughput_runs_per_s": {"baseline": base, "during_faults": faulted,
                                  "ratio": faulted / base if base and faulted else None},
        "steps": {"executed": found.steps_executed, "journaled": found.steps_journaled},
        "applied": applied,
        "examples": {name: list(items[:5]) for name, items in examples if items},
    }


class Submitted:
    """The runs a phase submitted, and how many of them have ended: what its progress bar
    counts (of `--runs`). The child runs they start are drained and checked too, but not
    counted: the store's counts by state hold them, which put a bar past its total."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self._open: set[int] = set()
        self._ended_in_store = -1  # the store's count of ended runs at the last look

    def add(self, ids: Sequence[int]) -> None:
        self.ids += ids
        self._open.update(ids)

    async def ended(self, app: App, ended_in_store: int) -> int:
        """How many of the submitted runs have ended; read again (in chunks) only once
        the store's count of ended runs, children and all, has moved."""
        if ended_in_store != self._ended_in_store:
            self._ended_in_store = ended_in_store
            still = sorted(self._open)
            for start in range(0, len(still), CHUNK):
                runs = await _patient(lambda: app.read_runs(still[start:start + CHUNK]))
                self._open -= {run.id for run in runs if run.state in TERMINAL_STATES}
        return len(self.ids) - len(self._open)


async def _cancel_next(app: App, cancels: Sequence[int], issued: int) -> int:
    """Cancel the next few of `cancels` (a few per look, spread over the drain); the
    count issued so far. A run that ended first is no longer cancellable: it counts."""
    for run_id in cancels[issued:issued + 5]:
        try:
            await _patient(lambda: app.cancel(run_id))
        except InvalidTransition:
            pass  # it ended first
        issued += 1
    return issued


def run_verify(options: Options, console: Console) -> Outcome:
    place = place_for(options.url)
    work = Path(tempfile.mkdtemp(prefix="runwright-verify-"))
    (work / "ledger").mkdir()
    (work / "logs").mkdir()
    pools: list[Pool] = []
    try:
        return asyncio.run(_verify(options, place, work, pools, console))
    finally:
        for pool in pools:
            pool.close()
        try:
            asyncio.run(place.drop())
        finally:
            shutil.rmtree(work, ignore_errors=True)


async def _verify(options: Options, place: Place, work: Path, pools: list[Pool],
                  console: Console) -> Outcome:
    app = verify_app(place.url)
    console.print(f"verify's own {PLACE_WORDS[place.backend]}: {place.name}", highlight=False,
                  soft_wrap=True)
    await app.open()  # creates verify's schema before the workers race to
    try:
        pool = Pool(place.url, options.workers, options.lease_s, work / "ledger", work / "logs")
        pools.append(pool)
        shapes = random.Random(f"{options.seed}:workload")
        baseline_n = min(options.runs, max(20, options.runs // 10))
        columns = (TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[note]}"))
        with Progress(*columns, console=console, transient=False) as progress:
            await _wait_ready(app, pool, options.workers)
            # Both phases offer the same load: the fault phase's runs spread over 2x the
            # longest fault period (so every kind of fault lands while runs are in flight,
            # however fast this deployment drains), the baseline's at the same rate.
            periods = {"kill": options.kill_every_s, "stall": options.stall_every_s,
                       "blip": options.blip_every_s}
            fault_n = options.runs - baseline_n
            spread_s = SPREAD * max(periods.values())
            rate = fault_n / spread_s if spread_s > 0 and fault_n else math.inf
            baseline = Submitted()
            base_ids = await _submit(app, options, shapes, baseline_n, rate, [], into=baseline)
            bar = progress.add_task("baseline (no faults)", total=len(base_ids), note="")
            await _drain(app, pool, progress, bar, baseline, [], options.timeout_s)
            injector = Injector(place, pool, stall_s(options.lease_s), lambda: _pids(app),
                                lambda: _busy(app))
            plan = schedule(options.seed, options.workers, periods, options.timeout_s)
            cancels: list[int] = []
            faulted = Submitted()
            feeding = asyncio.ensure_future(_submit(app, options, shapes, fault_n, rate, cancels,
                                                    into=faulted))
            bar = progress.add_task("faults", total=fault_n, note="")
            faults = asyncio.ensure_future(_inject(plan, injector, progress, bar))
            try:
                crashes, _ = await _drain(app, pool, progress, bar, faulted, cancels,
                                          options.timeout_s, feeding)
                fault_ids = await feeding
            finally:
                await halt(faults, feeding)
                injector.close()
            store, expected = await _read_all(app, base_ids + fault_ids, progress)
        findings = check(expected, store, Ledger.read(work / "ledger"))
        base_runs = [store[i].run for i in base_ids if i in store]
        fault_runs = [store[i].run for i in fault_ids if i in store]
        report = _report(options, place, pool, findings, injector, len(plan), crashes,
                         throughput(base_runs), throughput(fault_runs), len(cancels), rate)
        return Outcome(report, findings)
    finally:
        await app.close()


async def _wait_ready(app: App, pool: Pool, workers: int) -> None:
    """Until every worker registered (a baseline that measured start-up would be wrong)."""
    deadline = time.monotonic() + 120
    while len(await _patient(app.list_workers)) < workers:
        crashed = pool.crashed()
        if crashed:
            raise VerifyAborted(f"a verify worker could not start: {crashed[0]}")
        if time.monotonic() > deadline:
            raise VerifyAborted("the verify workers did not register within 120 s")
        await asyncio.sleep(0.1)


async def _pids(app: App) -> set[int]:
    return {w.pid for w in await _patient(app.list_workers)}


async def _busy(app: App) -> set[int]:
    """The pids of the workers that own a running run now."""
    pids = {w.id: w.pid for w in await _patient(app.list_workers)}
    running = await _patient(lambda: app.list_runs(states=[RunState.RUNNING], limit=1000))
    return {pids[run.owner] for run in running if run.owner in pids}


async def _submit(app: App, options: Options, shapes: random.Random, count: int, rate: float,
                  cancels: list[int], queue: str | None = None,
                  extra: dict[str, Any] | None = None, into: Submitted | None = None) -> list[int]:
    """Submit `count` runs of the workload at `rate` runs per second, in chunks; the seeded
    `shapes` decides which sleep, start a child, or are to be cancelled (into `cancels`).
    `queue` and `extra` (arguments): those of a fleet session. `into`: told of each chunk
    as it is submitted (a phase's bar counts them)."""
    items = [{"n": n, "steps": options.steps,
              "sleep_s": SLEEP_S if shapes.random() < SLEEP_SHARE else 0.0,
              "child": shapes.random() < CHILD_SHARE, **(extra or {})} for n in range(count)]
    to_cancel = [shapes.random() < CANCEL_SHARE for _ in range(count)]
    # Every kind of fault off: no spread to keep, so the whole chunk at once.
    size = CHUNK if math.isinf(rate) else max(1, min(CHUNK, math.ceil(rate * SPREAD_TICK_S)))
    ids: list[int] = []
    started = time.monotonic()
    for start in range(0, count, size):
        chunk = items[start:start + size]
        handles = await _patient(lambda: app.submit_many(RUN_TASK, chunk, queue=queue))
        ids += [h.id for h in handles]
        if into is not None:
            into.add([h.id for h in handles])
        cancels += [h.id for h, cancel in zip(handles, to_cancel[start:start + size]) if cancel]
        delay = started + (start + size) / rate - time.monotonic()
        if start + size < count and delay > 0:
            await asyncio.sleep(delay)
    return ids


async def _drain(app: App, pool: Pool, progress: Progress, bar: Any, phase: Submitted,
                 cancels: list[int], timeout_s: float,
                 feeding: asyncio.Future[list[int]] | None = None) -> tuple[int, int]:
    """Until no run of verify's is queued or running (or `timeout_s`), children included,
    cancelling a few runs on the way; the bar counts the runs `phase` submitted that have
    ended. Returns how many workers exited on their own (each restarted) and the runs now
    in the store."""
    deadline = time.monotonic() + timeout_s
    issued = 0  # of `cancels`, which the feeder extends as it submits
    crashes = 0
    while True:
        counts = await _patient(app.count_by_state)
        total = sum(counts.values())
        ended = sum(n for state, n in counts.items() if state in TERMINAL_STATES)
        progress.update(bar, completed=await phase.ended(app, ended))
        issued = await _cancel_next(app, cancels, issued)
        for slot, proc in enumerate(pool.procs):
            if proc.poll() is not None:  # exited on its own: say why, and restart it
                crashes += 1
                pool.exits.append(pool.tail(slot))
                pool.kill(slot)
        fed = feeding is None or feeding.done()
        if (fed and ended == total and issued == len(cancels)) or time.monotonic() > deadline:
            return crashes, total
        await asyncio.sleep(POLL_S)


async def _inject(plan: Sequence[Fault], injector: Injector, progress: Progress, bar: Any) -> None:
    """Each fault at its time, in a task of its own (see Injector.apply)."""
    started = time.monotonic()
    landing: set[asyncio.Task[None]] = set()

    async def land(fault: Fault) -> None:
        await injector.apply(fault)
        counts = injector.counts
        progress.update(bar, note=f"kills {counts['kills']} stalls {counts['stalls']} "
                                  f"blips {counts['blips']}")

    try:
        for fault in plan:
            delay = started + fault.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.ensure_future(land(fault))
            landing.add(task)
            task.add_done_callback(landing.discard)
    finally:
        await halt(*landing)


async def _read_all(app: App, parents: list[int], progress: Progress) -> tuple[dict[int, RunData], list[int]]:
    """Every run, its events and its journal; children found in their parents' journals.
    The bar counts the runs submitted (`parents`) whose reading is done; their children
    are read and checked too, not counted."""
    store: dict[int, RunData] = {}
    expected = list(parents)
    counted = set(parents)
    bar = progress.add_task("checking", total=len(counted), note="")
    queue = list(parents)
    while queue:
        batch, queue = queue[:CHUNK], queue[CHUNK:]
        runs: list[Run] = await _patient(lambda: app.read_runs(batch))
        by_id = {r.id: r for r in runs}
        for start in range(0, len(batch), READ_AT_ONCE):
            ids = [i for i in batch[start:start + READ_AT_ONCE] if i in by_id]
            for data in await asyncio.gather(*(_read_one(app, by_id[i]) for i in ids)):
                store[data.run.id] = data
                kids = children_of(data)
                expected += kids
                queue += kids
            progress.update(bar, advance=sum(i in counted for i in batch[start:start + READ_AT_ONCE]))
    return store, expected


async def _read_one(app: App, run: Run) -> RunData:
    events: list[Event] = []
    while True:
        after = events[-1].seq if events else 0
        page = await _patient(lambda: app.events_page(run.id, after=after))
        if not page:
            break
        events += page
    steps = await _patient(lambda: app.store.step_list(run.id))
    return RunData(run, events, steps)


def _report(options: Options, place: Place, pool: Pool, found: Findings, injector: Injector,
            scheduled: int,
            crashes: int, base: float | None, faulted: float | None, cancels: int,
            rate: float) -> dict[str, Any]:
    counts = injector.counts
    return {
        "ok": found.ok,
        "backend": place.backend,
        "place": place.name,
        "seed": options.seed,
        "workers": options.workers,
        "lease_s": options.lease_s,
        "offered_runs_per_s": None if math.isinf(rate) else rate,
        "runs": {"submitted": options.runs, "checked": found.runs, "finished": found.finished,
                 "succeeded": found.succeeded, "cancelled": found.cancelled,
                 "cancels_requested": cancels},
        "violations": found.violations(),
        "faults": {"scheduled": scheduled, "kills": counts["kills"], "stalls": counts["stalls"],
                   "blips": counts["blips"], "connections_cut": counts["connections_cut"],
                   "writers_killed": counts["writers_killed"], "worker_exits": crashes,
                   "skipped": sum(injector.skipped.values()), "skipped_why": dict(injector.skipped)},
        **findings_summary(found, base, faulted, injector.applied, [("worker_exits", pool.exits)]),
    }
