"""`runwright verify --fleet`: the fleet already running on the user's store runs verify's
workload, on a queue of this session's, while faults reach its workers over the fleet bus.

- the session: a queue `runwright.verify.<id>` that every ready worker is told to serve
  (`verify-serve`, renewed every RENEW_S for SERVE_FOR_S: a worker that starts meanwhile, a
  restarted one, joins; a verify that dies is served no more once it lapses). No worker
  took it: one line, exit 8. The report says how many took it, and which obey faults;
- the ledger: a run of verify's (`runwright.verify_ledger`, on `<queue>.ledger`, served by
  no worker) that verify claims and holds; the workers append their ledger lines to its log
  (see runwright.verify._tasks). Verify registers as a worker for it while it runs. If the
  fleet takes that run back (verify taken for dead: stopped past its liveness), the
  workers' lines are refused from then on: verify aborts, one line and exit 1, and prints
  no figure. Its renewals are tried one by one, so a failing bus stops no heartbeat;
- faults, on the seeded schedule, sent to one worker at a time that obeys them
  (`--allow-verify-faults`): die (counted a kill once a new worker process came up on its
  host: its supervisor's restart; else `not restarted`), stall (its event loop blocked
  past its lease), blip (its database sessions cut; SQLite has none: skipped). With no
  worker obeying faults, every fault is reported skipped and the workload still checked;
- the end, or an interrupt: the queue paused in the store first (durable: no claim of the
  fleet takes a run of it from then on, however stale its worker, e.g. one stopped across
  the end that wakes still serving it; a worker refuses to serve a paused session), then
  `verify-release`, open runs cancelled, every run of the session's queues removed
  (run_reclaim of those ids only); verify deregisters. The queues of sessions that had
  ended when this one began are resumed at its end, if SWEEP_AFTER_S have passed.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..app import App
from ..core._versions import major_of
from ..core._waiting import halt
from ..errors import InvalidTransition, StoreError
from ..fleet import Outcome as Reply
from ..fleet import ReportRow, State
from ..fleet._presence import reads_as
from ..runs import TERMINAL_STATES, Run, RunState
from ..store._liveness import this_machine
from ..store._params import (
    QueuePauseParams,
    RunClaimParams,
    RunExtendParams,
    RunFinishParams,
    RunReclaimParams,
    WorkerHeartbeatParams,
    WorkerRegisterParams,
)
from ._checks import Findings, Ledger, check, throughput
from ._faults import Fault, schedule, stall_s
from ._report import obeying, processes
from ._runner import (
    SPREAD,
    Options,
    Outcome,
    Submitted,
    VerifyAborted,
    _cancel_next,
    _patient,
    _read_all,
    _read_one,
    _submit,
    findings_summary,
)
from ._serving import QUEUE_PREFIX
from ._workload import LEDGER_TASK

__all__ = ["NoFleet", "Session", "run_fleet_verify"]

SERVE_FOR_S = 30.0  # a worker serves the queue this long after each renewal
RENEW_S = 3.0
BUS_WINDOW_S = 5.0
REPLACE_WAIT_S = 90.0  # a killed worker's supervisor has this long to start another
LEDGER_LEASE_S = 3600.0
CLEANUP_WAIT_S = 60.0
SWEEP_AFTER_S = SERVE_FOR_S + 5  # an ended session's pause outlasts its last renewal
POLL_S = 0.5
MAX_STALL_S = 300.0
PAGE = 500


class NoFleet(Exception):
    """No running worker took verify's session: nothing ran, nothing was checked."""


@dataclass
class Session:
    """What this session made in the user's store: enough to remove it, even after an
    interrupt (a fresh App does the cleanup)."""

    url: str | None
    version: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    worker_id: int = 0
    ledger: tuple[int, int] | None = None  # the ledger run and verify's fence on it
    ended_before: set[str] = field(default_factory=set)  # paused queues of sessions ended
    began: float = field(default_factory=time.monotonic)

    @property
    def queue(self) -> str:
        return f"{QUEUE_PREFIX}{self.id}"

    @property
    def ledger_queue(self) -> str:
        return f"{self.queue}.ledger"


@dataclass
class Member:
    name: str
    host: str
    pid: int
    faults: bool
    lease_s: float


@dataclass
class Roster:
    """The workers serving the session, as the last renewal found them."""

    members: dict[str, Member] = field(default_factory=dict)
    took: set[str] = field(default_factory=set)  # every process that took it, for the report
    obeyed: set[str] = field(default_factory=set)  # ... and said it obeys faults
    refused: dict[str, str] = field(default_factory=dict)  # name -> why (its error)
    pids: set[int] = field(default_factory=set)  # every worker pid seen, to tell a new one
    gone: set[int] = field(default_factory=set)  # pids that died: no more faults to them

    def update(self, rows: Sequence[ReportRow]) -> None:
        members = {}
        for row in rows:
            if row.outcome is Reply.APPLIED and isinstance(row.detail, dict) and row.pid not in self.gone:
                members[row.name] = Member(row.name, row.host, row.pid, bool(row.detail.get("faults")),
                                           float(row.detail.get("lease_s") or 30.0))
                self.took.add(f"{row.host}:{row.pid}")
                if row.detail.get("faults"):
                    self.obeyed.add(f"{row.host}:{row.pid}")
            elif row.outcome is Reply.FAILED:
                self.refused[f"{row.name} ({row.host}:{row.pid})"] = row.error or "failed"
        self.members = members

    def obeying(self) -> list[Member]:
        return [m for name, m in sorted(self.members.items()) if m.faults and m.pid not in self.gone]


def run_fleet_verify(options: Options, console: Console) -> Outcome:
    session = Session(options.url, options.app_version)
    try:
        return asyncio.run(_verify(options, session, console))
    finally:
        left = asyncio.run(_clean(session))
        if left:
            console.print(f"[yellow]note[/]: {left} of verify's runs could not be removed yet "
                          f"(queue {session.queue}): they are cancelled; retention removes them",
                          highlight=False, soft_wrap=True)


def _app(session: Session) -> App:
    # The user's store: never migrated by verify (a schema behind is refused, exit 4).
    return App(session.url, auto_migrate=False, version=session.version)


async def _verify(options: Options, session: Session, console: Console) -> Outcome:
    app = _app(session)
    await app.open()
    roster = Roster()
    keeper: asyncio.Future[None] | None = None
    phases: asyncio.Future[Outcome] | None = None
    try:
        session.ended_before = {q for q in await app.fleet.paused_queues() if q.startswith(QUEUE_PREFIX)}
        await _serve(app, session, roster)
        if not roster.members:
            raise NoFleet(_nobody(app, roster, await app.fleet.workers()))
        console.print(f"verify session {session.queue}: served by {processes(len(roster.members))} of "
                      f"fleet {app.fleet.root} ({obeying(len(roster.obeying()))}); the report counts every "
                      f"process that served it, restarted ones included", highlight=False, soft_wrap=True)
        await _hold_ledger(app, session)
        keeper = asyncio.ensure_future(_keep(app, session, roster))
        phases = asyncio.ensure_future(_phases(app, options, session, roster, console))
        return await _supervised(phases, keeper)
    finally:
        await halt(*(task for task in (phases, keeper) if task is not None))
        await app.close()


def _nobody(app: App, roster: Roster, census: list[dict[str, Any]]) -> str:
    root = app.fleet.root
    if not census:
        return (f"no process of fleet {root} is running on this store: start `runwright worker` "
                f"processes (the fleet's app version's major must be {major_of(app.version)}: "
                f"--app-version)")
    why = "; ".join(f"{name}: {error}" for name, error in sorted(roster.refused.items())[:3])
    states = ", ".join(f"{row['name']} {row['state']}" for row in census[:6])
    return f"no worker of fleet {root} took verify's session ({states}){': ' + why if why else ''}"


async def _serve(app: App, session: Session, roster: Roster) -> None:
    rows = await app.fleet.broadcast("verify-serve", {"queue": session.queue, "for_s": SERVE_FOR_S},
                                     timeout_s=BUS_WINDOW_S)
    roster.update(rows)
    census = await app.fleet.census()
    roster.pids |= {row.pid for row in census.live() if row.kind == "worker"}


async def _hold_ledger(app: App, session: Session) -> None:
    """Register as a worker of the ledger's queue, submit the ledger run and claim it."""
    store, major = app.store, major_of(app.version)
    session.worker_id = await store.worker_register(WorkerRegisterParams(
        host=this_machine(), pid=os.getpid(), queues=[session.ledger_queue], tasks=[LEDGER_TASK],
        version=app.version, majors={LEDGER_TASK: [major]}))
    await app.submit(LEDGER_TASK, queue=session.ledger_queue, key=f"{session.queue}.ledger")
    claimed = await store.run_claim(RunClaimParams(session.worker_id, [session.ledger_queue], [LEDGER_TASK],
                                                   1, LEDGER_LEASE_S, majors={LEDGER_TASK: [major]}))
    if not claimed:
        raise VerifyAborted(f"verify could not claim its ledger run on {session.ledger_queue}")
    session.ledger = (claimed[0].id, claimed[0].fence)


async def _keep(app: App, session: Session, roster: Roster) -> None:
    """Renew the session (new and restarted workers join it) and verify's registration,
    each on its own (a bus that fails must not stop the heartbeat), and check that the
    ledger run is still verify's (`_hold_check`)."""
    while True:
        await asyncio.sleep(RENEW_S)
        renewals = (lambda: _serve(app, session, roster),
                    lambda: app.store.worker_heartbeat(WorkerHeartbeatParams(session.worker_id)))
        for renewal in renewals:
            try:
                await renewal()
            except StoreError:
                pass  # the next renewal; the workers' serving outlasts a few
        await _hold_check(app, session)


async def _hold_check(app: App, session: Session) -> None:
    """Renew the ledger run's lease; raise VerifyAborted once it is no longer verify's.
    Then the fleet took verify for dead (its liveness lapsed: verify was stopped, or its
    store lost its mark) and took the run back: from then on every ledger line a worker
    writes is refused, so no figure verify could print would be true."""
    assert session.ledger is not None
    try:
        extended = await app.store.run_extend(RunExtendParams(session.worker_id, [session.ledger],
                                                              LEDGER_LEASE_S))
    except StoreError:
        return  # asked again at the next renewal
    if extended.lost:
        raise VerifyAborted(f"the fleet declared this verify session dead and took back its ledger "
                            f"run {session.ledger[0]} (was verify stopped, or its store unreachable, "
                            f"past its liveness?): its workers' ledger lines are refused from then "
                            f"on, so nothing can be checked; run verify again")


async def _supervised(phases: asyncio.Future[Outcome], keeper: asyncio.Future[None]) -> Outcome:
    """The phases' outcome, unless the keeper ended first: the session is not held any
    more, so verify aborts (the caller's cleanup stops the phases)."""
    both: list[asyncio.Future[Any]] = [phases, keeper]
    await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
    if phases.done():
        return phases.result()
    failure = keeper.exception()
    if isinstance(failure, VerifyAborted):
        raise failure
    raise VerifyAborted(f"verify stopped renewing its session ({failure!r}): nothing can be checked")


async def _phases(app: App, options: Options, session: Session, roster: Roster,
                  console: Console) -> Outcome:
    assert session.ledger is not None
    extra = {"ledger": list(session.ledger)}
    shapes = random.Random(f"{options.seed}:workload")
    baseline_n = min(options.runs, max(20, options.runs // 10))
    periods = {"kill": options.kill_every_s, "stall": options.stall_every_s, "blip": options.blip_every_s}
    fault_n = options.runs - baseline_n
    spread_s = SPREAD * max(periods.values())
    rate = fault_n / spread_s if spread_s > 0 and fault_n else math.inf
    columns = (TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("{task.fields[note]}"))
    with Progress(*columns, console=console, transient=False) as progress:
        baseline = Submitted()
        base_ids = await _submit(app, options, shapes, baseline_n, rate, [], session.queue, extra,
                                 into=baseline)
        bar = progress.add_task("baseline (no faults)", total=len(base_ids), note="")
        await _drain(app, session, progress, bar, baseline, [], options.timeout_s)
        injector = FleetInjector(app, session, roster)
        plan = schedule(options.seed, max(1, len(roster.members)), periods, options.timeout_s)
        cancels: list[int] = []
        faulted = Submitted()
        feeding = asyncio.ensure_future(_submit(app, options, shapes, fault_n, rate, cancels,
                                                session.queue, extra, into=faulted))
        bar = progress.add_task("faults", total=fault_n, note="")
        faults = asyncio.ensure_future(injector.run(plan, progress, bar))
        try:
            await _drain(app, session, progress, bar, faulted, cancels, options.timeout_s, feeding)
            fault_ids = await feeding
        finally:
            await halt(faults, feeding)
            await injector.settle()
        store, expected = await _read_all(app, base_ids + fault_ids, progress)
        await _hold_check(app, session)  # held to the end, or the ledger may lack lines
        ledger = await _read_ledger(app, session)
    findings = check(expected, store, ledger)
    base_runs = [store[i].run for i in base_ids if i in store]
    fault_runs = [store[i].run for i in fault_ids if i in store]
    report = _report(app, options, session, roster, findings, injector, len(cancels), rate,
                     throughput(base_runs), throughput(fault_runs))
    return Outcome(report, findings)


async def _read_ledger(app: App, session: Session) -> Ledger:
    assert session.ledger is not None
    ledger_id = session.ledger[0]
    runs = await _patient(lambda: app.read_runs([ledger_id]))
    if not runs:
        raise VerifyAborted("verify's ledger run is gone (did retention remove it?): nothing to check")
    data = await _read_one(app, runs[0])
    if any(event.kind == "trimmed" for event in data.events):
        raise VerifyAborted("the fleet's retention trimmed verify's ledger (--retain-max-events): "
                            "run verify with more room, or with its own workers (without --fleet)")
    return Ledger.of_events(data.events)


async def _drain(app: App, session: Session, progress: Progress, bar: Any, phase: Submitted,
                 cancels: list[int], timeout_s: float,
                 feeding: asyncio.Future[list[int]] | None = None) -> int:
    """Until no run of the session's queue is open (or `timeout_s`), children included,
    cancelling a few on the way; the bar counts the runs `phase` submitted that have
    ended. Returns how many runs the queue holds."""
    deadline = time.monotonic() + timeout_s
    issued = 0
    while True:
        stats = await _patient(app.queue_stats)
        counts = {state: n for queue, state, n, _ in stats if queue == session.queue}
        total = sum(counts.values())
        ended = sum(n for state, n in counts.items() if state in TERMINAL_STATES)
        progress.update(bar, completed=await phase.ended(app, ended))
        issued = await _cancel_next(app, cancels, issued)
        fed = feeding is None or feeding.done()
        if (fed and ended == total and issued == len(cancels)) or time.monotonic() > deadline:
            return total
        await asyncio.sleep(POLL_S)


class FleetInjector:
    """Sends the schedule's faults over the bus, each to a worker that obeys them."""

    def __init__(self, app: App, session: Session, roster: Roster) -> None:
        self.app = app
        self.session = session
        self.roster = roster
        self.counts: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()  # why -> how many
        self.applied: list[dict[str, object]] = []
        self._started = time.monotonic()
        self._turns: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._landing: set[asyncio.Task[None]] = set()
        self._waits: set[asyncio.Task[None]] = set()  # replacements still awaited
        self._replacements: set[int] = set()  # pids counted as a kill's replacement

    async def run(self, plan: Sequence[Fault], progress: Progress, bar: Any) -> None:
        for fault in plan:
            delay = self._started + fault.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.ensure_future(self._land(fault, progress, bar))
            self._landing.add(task)
            task.add_done_callback(self._landing.discard)

    async def _land(self, fault: Fault, progress: Progress, bar: Any) -> None:
        targets = self.roster.obeying()
        if not targets:
            why = ("no worker that obeys faults was ready at that moment" if self.roster.obeyed
                   else "no worker obeys faults (--allow-verify-faults)")
            self.skipped[why] += 1
            return
        member = targets[fault.slot % len(targets)]
        async with self._turns[member.name]:
            if member.pid in self.roster.gone:
                self.skipped["its worker died before it landed"] += 1
                return
            await self._apply(fault.kind, member)
        counts = self.counts
        progress.update(bar, note=f"kills {counts['kills']} stalls {counts['stalls']} "
                                  f"blips {counts['blips']}")

    async def _apply(self, kind: str, member: Member) -> None:
        payload: dict[str, Any] = {"queue": self.session.queue,
                                   "kind": {"kill": "die"}.get(kind, kind)}
        stalled_s = min(MAX_STALL_S, stall_s(member.lease_s))
        if kind == "stall":
            payload["stall_s"] = stalled_s
        try:
            rows = await self.app.fleet.broadcast("verify-fault", payload, targets=[member.name],
                                                  timeout_s=BUS_WINDOW_S)
        except StoreError:
            self.skipped["the bus could not be reached"] += 1
            return
        row = next((r for r in rows if r.pid == member.pid), None)
        outcome = None if row is None else row.outcome
        self.applied.append({"at_s": round(time.monotonic() - self._started, 3), "kind": kind,
                             "worker": f"{member.name}@{member.host}:{member.pid}",
                             "outcome": None if outcome is None else outcome.value})
        if kind == "kill" and outcome in (Reply.APPLIED, Reply.DEPARTED):
            self.roster.gone.add(member.pid)
            waiting = asyncio.ensure_future(self._replaced(member))
            self._waits.add(waiting)
            waiting.add_done_callback(self._waits.discard)
        elif outcome is Reply.APPLIED:
            self.counts["stalls" if kind == "stall" else "blips"] += 1
            if kind == "stall":
                await asyncio.sleep(stalled_s + 1)  # its turn lasts while it is stalled
        elif row is not None and row.error:
            self.skipped[row.error] += 1
        else:
            self.skipped[f"the worker read {outcome.value if outcome else 'gone'}"] += 1

    async def _replaced(self, member: Member) -> None:
        """A kill counts once a new worker process is ready on its host: the supervisor's
        restart (a fleet without one loses a worker: `not restarted`). New: not a pid
        known at the kill (a session renewal records every pid it sees, the restarted one
        too as soon as it joins, resyncing still), nor another kill's replacement."""
        known = set(self.roster.pids)
        deadline = time.monotonic() + REPLACE_WAIT_S
        while time.monotonic() < deadline:
            try:
                census = await self.app.fleet.census()
            except StoreError:
                await asyncio.sleep(POLL_S)
                continue
            stale_s = self.app.fleet.settings.stale_s
            for row in census.live():
                if row.kind == "worker" and row.pid not in known | self._replacements \
                        and row.host == member.host and reads_as(census, row, stale_s) == State.READY:
                    self.roster.pids.add(row.pid)
                    self._replacements.add(row.pid)
                    self.counts["kills"] += 1
                    return
            await asyncio.sleep(POLL_S)
        self.counts["not_restarted"] += 1

    async def settle(self) -> None:
        """Stop landing faults; wait for the kills' replacements (bounded by their wait)."""
        await halt(*self._landing)
        await asyncio.gather(*self._waits, return_exceptions=True)


async def _clean(session: Session) -> int:
    """Pause the queue, release it, cancel what is open, remove every run of the session:
    how many could not be removed (not ended within CLEANUP_WAIT_S)."""
    app = _app(session)
    try:
        if session.ledger is not None:  # its runs may be out
            await _patient(lambda: _pause(app, session.queue, True))
        try:
            await app.fleet.broadcast("verify-release", {"queue": session.queue}, timeout_s=BUS_WINDOW_S)
        except StoreError:
            pass  # the workers stop serving it at their next heartbeat: it is paused
        if session.ledger is not None:
            await _end_ledger(app, session)
        runs = await _session_runs(app, session)
        for start in range(0, len(runs), 50):
            await asyncio.gather(*(_cancel(app, r) for r in runs[start:start + 50]
                                   if r.state not in TERMINAL_STATES))
        deadline = time.monotonic() + CLEANUP_WAIT_S
        while any(r.state not in TERMINAL_STATES for r in runs) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
            runs = await _session_runs(app, session)
        ids = [r.id for r in runs]
        for start in range(0, len(ids), 1000):
            await _patient(lambda: app.store.run_reclaim(RunReclaimParams(
                ended_before=app.now() + 60, limit=1000, run_ids=ids[start:start + 1000])))
        if session.worker_id:
            await _patient(lambda: app.store.worker_deregister(session.worker_id))
        if time.monotonic() - session.began >= SWEEP_AFTER_S:
            for queue in session.ended_before:
                await _patient(lambda: _pause(app, queue, False))
        return len(await _session_runs(app, session))
    finally:
        await app.close()


async def _pause(app: App, queue: str, paused: bool) -> bool:
    await app.open()
    return await app.store.queue_set_paused(QueuePauseParams(app.fleet.root, queue, paused))


async def _end_ledger(app: App, session: Session) -> None:
    assert session.ledger is not None
    run_id, fence = session.ledger
    try:
        await app.store.run_finish_many([RunFinishParams(run_id, fence, RunState.SUCCEEDED, result="null")])
    except StoreError:
        pass  # its cancel below ends it


async def _cancel(app: App, run: Run) -> None:
    try:
        await _patient(lambda: app.cancel(run.id))
    except InvalidTransition:
        pass  # it ended meanwhile


async def _session_runs(app: App, session: Session) -> list[Run]:
    found: list[Run] = []
    for queue in (session.queue, session.ledger_queue):
        before: int | None = None
        while True:
            page = await _patient(lambda: app.list_runs(queue=queue, limit=PAGE, before_id=before))
            found += page
            if len(page) < PAGE:
                break
            before = page[-1].id
    return found


def _backend(url: str) -> str:
    scheme = url.split(":", 1)[0].lower()
    return {"sqlite": "sqlite", "redis": "redis", "rediss": "redis"}.get(scheme, "postgres")


def _report(app: App, options: Options, session: Session, roster: Roster, found: Findings,
            injector: FleetInjector, cancels: int, rate: float, base: float | None,
            faulted: float | None) -> dict[str, Any]:
    counts = injector.counts
    return {
        "ok": found.ok,
        "backend": _backend(app.url),
        "place": session.queue,
        "mode": "fleet",
        "seed": options.seed,
        "workers": len(roster.took),
        "lease_s": None,
        "offered_runs_per_s": None if math.isinf(rate) else rate,
        "fleet": {"root": app.fleet.root, "queue": session.queue, "workers_serving": len(roster.took),
                  "workers_obeying_faults": len(roster.obeyed), "refused": roster.refused},
        "runs": {"submitted": options.runs, "checked": found.runs, "finished": found.finished,
                 "succeeded": found.succeeded, "cancelled": found.cancelled,
                 "cancels_requested": cancels},
        "violations": found.violations(),
        "faults": {"scheduled": len(injector.applied) + sum(injector.skipped.values()),
                   "kills": counts["kills"], "not_restarted": counts["not_restarted"],
                   "stalls": counts["stalls"], "blips": counts["blips"], "connections_cut": 0,
                   "writers_killed": 0, "worker_exits": 0,
                   "skipped": sum(injector.skipped.values()), "skipped_why": dict(injector.skipped)},
        **findings_summary(found, base, faulted, injector.applied),
    }
