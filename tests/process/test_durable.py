"""Durable execution checked with real worker processes, on every backend: journaled steps
across SIGKILLs, the event log followed from other processes, a zombie's refused writes,
a durable sleep across a restart of every worker, and child runs across a SIGKILL.

Tasks are in apps.py; they write a ledger line per execution of a step or child (event
name, run id, fence, pid), so a test sees every execution, not only the one journaled.
Nothing here sleeps to let something happen: every wait is on a condition, with a
deadline that only stops a broken test from hanging. (Test 1 sleeps a random moment
before each kill: that chooses *when* to kill, it waits for nothing.)
"""

from __future__ import annotations

import asyncio
import random
import signal

import pytest

import runwright as rw
from runwright.core._journal import StepRecord
from runwright.runs import Run, RunState
from runwright.store._params import EventListParams, RunListParams

from . import apps
from .harness import WorkerFleet, WorkerProcess, owner_pid, sigstop_outside_a_write, wait_until

pytestmark = pytest.mark.process

STEPS = 20
STEPS_SUM = sum(range(STEPS))
Execution = tuple[int, int]  # (fence, pid) of one ledger line


async def _done(app: rw.App, run_id: int) -> Run | None:
    run = await app.store.run_get(run_id)
    return run if run is not None and run.done else None


async def _kill_owner(app: rw.App, fleet: WorkerFleet, run: Run) -> WorkerProcess:
    """SIGKILL the worker process that holds `run` and reap it."""
    pid = await owner_pid(app, run)
    (victim,) = [w for w in fleet.workers if w.pid == pid]
    victim.signal(signal.SIGKILL)
    assert await victim.wait_exit() == -signal.SIGKILL
    return victim


def _step_executions(fleet: WorkerFleet, run_id: int, steps: int) -> dict[int, list[Execution]]:
    """Step position -> every execution of it in the ledger, as (fence, pid), sorted."""
    return {i: sorted(fleet.events_by_run(f"step-{i}").get(run_id, [])) for i in range(steps)}


def _assert_journal_complete(journal: list[StepRecord], steps: int) -> None:
    assert [(s.position, s.name, s.status) for s in journal] == [
        (i, f"step-{i}", "done") for i in range(steps)], "every step journaled, in order, none missing"
    assert [s.value() for s in journal] == list(range(steps)), "journaled results"
    fences = [s.fence for s in journal]
    assert fences == sorted(fences), f"a later step journaled under an earlier claim: fences {fences}"


def _orphan_executions(executions: dict[int, list[Execution]], journal: list[StepRecord],
                       killed: dict[int, int]) -> dict[int, Execution]:
    """Check each step's executions against its journal entry, and return the orphans:
    step position -> the one execution that the journal did not record.

    A step ran exactly once under the claim (fence) that journaled it. Any other execution
    must be the side effect of a step killed before its journal write: under a claim whose
    worker was killed (`killed`: fence -> pid), earlier than the journaling claim, and the
    step that claim was executing when it died (every step before it journaled by then).
    So each step ran at most twice, and each killed claim left at most one orphan.
    """
    orphans: dict[int, Execution] = {}
    for record in journal:
        ran = executions[record.position]
        where = f"step {record.position} (journaled under fence {record.fence}; executions {ran})"
        assert len([e for e in ran if e[0] == record.fence]) == 1, \
            f"{where}: not exactly one execution under the journaling claim"
        extra = [e for e in ran if e[0] != record.fence]
        assert len(extra) <= 1, f"{where}: executed more than twice"
        if not extra:
            continue
        fence, pid = extra[0]
        assert killed.get(fence) == pid, f"{where}: an extra execution by a claim that was not killed"
        assert fence < record.fence, f"{where}: the extra execution came after the journaled one"
        assert all(s.fence <= fence for s in journal[:record.position]), (
            f"{where}: the killed claim {fence} had not reached this step yet")
        orphans[record.position] = (fence, pid)
    by_claim = [fence for fence, _ in orphans.values()]
    assert len(by_claim) == len(set(by_claim)), f"one killed claim left several orphans: {orphans}"
    return orphans


# -- 1. a step runs once, unless killed between its side effect and its journal write ------

MAX_KILLS = 6


async def test_steps_run_once_across_random_sigkills(app: rw.App, fleet: WorkerFleet) -> None:
    """A run of 20 steps (20-60 ms each) on 2 workers; its owner is SIGKILLed at a random
    moment of each claim and replaced, up to 6 times, until the run ends. It succeeds with
    the right result; every step is journaled; every step ran once, except a step killed
    after its side effect and before its journal write, which ran once more, under the
    killed claim."""
    seed = random.randrange(1 << 32)
    print(f"kill timing seed: {seed}")
    rng = random.Random(seed)
    fleet.start(concurrency=2)
    fleet.start(concurrency=2)
    handle = await app.submit(apps.steps_with_ledger, steps=STEPS, min_s=0.02, max_s=0.06)

    killed: dict[int, int] = {}  # fence -> pid of the worker SIGKILLed while holding that claim
    while len(killed) < MAX_KILLS:
        # Kill only a claim that has journaled a step: then the step killed in flight was
        # journaled by the claim before, and no step is killed twice.
        run = await wait_until(lambda: _progressed_under_a_new_claim(app, handle.id, killed),
                               "the run journals a step under a new claim, or ends")
        if run.done:
            break
        await asyncio.sleep(rng.uniform(0.0, 0.15))  # a random moment into the claim
        run = await handle.refresh()
        if run.done:
            break
        if run.state is not RunState.RUNNING:
            continue  # between claims: wait for the next one, never kill a worker holding nothing
        victim = await _kill_owner(app, fleet, run)
        killed[run.fence] = victim.pid
        fleet.start(concurrency=2)

    final = await wait_until(lambda: _done(app, handle.id), "the run ends")
    print(f"kills: {len(killed)}, takeovers: {final.recoveries}")
    assert final.state is RunState.SUCCEEDED, f"the run ended {final.state}: {final.error}"
    assert final.value() == STEPS_SUM
    # A kill lands unless the run had finished (through_blinks) first: only the last kill can miss.
    landed = [fence for fence in killed if fence < final.fence]
    assert final.recoveries == len(landed) >= 1, f"takeovers {final.recoveries}, kills {killed}"
    assert final.fence == final.recoveries + 1, "every claim after the first was a takeover"

    journal = await app.store.step_list(handle.id)
    _assert_journal_complete(journal, STEPS)
    orphans = _orphan_executions(_step_executions(fleet, handle.id, STEPS), journal, killed)
    print(f"steps killed after their side effect, so executed twice: {orphans}")


async def _progressed_under_a_new_claim(app: rw.App, run_id: int, killed: dict[int, int]) -> Run | None:
    run = await app.store.run_get(run_id)
    if run.done:
        return run
    if run.state is not RunState.RUNNING or run.fence in killed:
        return None
    journal = await app.store.step_list(run_id)
    return run if any(s.fence == run.fence for s in journal) else None


KILLED_STEP = 7


async def test_a_step_killed_after_its_side_effect_runs_again_and_only_it(
        app: rw.App, fleet: WorkerFleet) -> None:
    """The crash point step.after_side_effect=kill, armed in the first worker only and
    narrowed to step 7: that step's side effect happens, then the worker dies before its
    journal write. The next worker replays steps 0-6 without running them, executes step
    7 again, and the rest once."""
    crash = f"step.after_side_effect:step-{KILLED_STEP}=kill"
    first = fleet.start(env={"RUNWRIGHT_CRASH_POINTS": crash})
    handle = await app.submit(apps.steps_with_ledger, steps=STEPS)
    assert await first.wait_exit("the armed worker kills itself") == -signal.SIGKILL
    assert [s.position for s in await app.store.step_list(handle.id)] == list(range(KILLED_STEP)), \
        f"killed before the journal write of step {KILLED_STEP}"
    assert _step_executions(fleet, handle.id, STEPS) == {
        i: [(1, first.pid)] if i <= KILLED_STEP else [] for i in range(STEPS)}, "up to the side effect"

    second = fleet.start()
    final = await wait_until(lambda: _done(app, handle.id), "the run ends")
    assert final.state is RunState.SUCCEEDED, f"the run ended {final.state}: {final.error}"
    assert final.value() == STEPS_SUM
    assert (final.fence, final.recoveries) == (2, 1), "one takeover"

    journal = await app.store.step_list(handle.id)
    _assert_journal_complete(journal, STEPS)
    assert [s.fence for s in journal] == [1] * KILLED_STEP + [2] * (STEPS - KILLED_STEP)
    executions = _step_executions(fleet, handle.id, STEPS)
    assert executions[KILLED_STEP] == [(1, first.pid), (2, second.pid)], \
        f"step {KILLED_STEP}: the killed execution and the re-execution"
    assert {i: ran for i, ran in executions.items() if i != KILLED_STEP} == {
        i: [(1, first.pid)] if i < KILLED_STEP else [(2, second.pid)]
        for i in range(STEPS) if i != KILLED_STEP}, "every other step exactly once, never replayed for real"
    assert _orphan_executions(executions, journal, {1: first.pid}) == {KILLED_STEP: (1, first.pid)}
    assert await second.stop() == 0


# -- 2. the event log, followed from other processes -----------------------------------

NARRATED_STEPS = 8
GATES = (2, 5)  # the run waits at these steps while the test SIGKILLs its owner


async def test_followers_read_the_whole_log_across_two_takeovers(app: rw.App, fleet: WorkerFleet) -> None:
    """A run of steps and `progress` events whose owner is SIGKILLed twice. A follower in
    another process reads its log from seq 1 to the terminal event, live: no gap, no
    repeat, in order, two `recovered` events. A second follower, SIGKILLed midway and
    replaced by one that resumes after the last seq it printed, gets the same log."""
    fleet.start()
    fleet.start()
    handle = await app.submit(apps.narrated_steps, steps=NARRATED_STEPS, gates=list(GATES))
    whole = fleet.follow(handle.id)
    cut = fleet.follow(handle.id)

    await wait_until(lambda: _waiting_at_gate(app, fleet, handle.id, GATES[0]),
                     "the run waits at its first gate")
    await wait_until(lambda: len(cut.seen()) >= 3, "the second follower printed a few events")
    cut.kill()
    before_cut = cut.seen()
    resumed = fleet.follow(handle.id, after=before_cut[-1][0])

    for gate in GATES:
        run = await wait_until(lambda: _waiting_at_gate(app, fleet, handle.id, gate),
                               f"the run waits at gate {gate}")
        await _kill_owner(app, fleet, run)
        fleet.start()
        fleet.open_gate(handle.id, gate)

    final = await wait_until(lambda: _done(app, handle.id), "the run ends")
    assert final.state is RunState.SUCCEEDED and final.value() == NARRATED_STEPS
    assert (final.recoveries, final.fence) == (2, 3), "taken over twice"
    for follower in (whole, resumed):
        code = await follower.wait_exit()
        assert code == 0, f"follower {follower.name} exit code {code}: {follower.err_path.read_text()}"

    log = [(e.seq, e.kind) for e in await app.store.event_list(EventListParams(handle.id))]
    kinds = [kind for _, kind in log]
    assert [seq for seq, _ in log] == list(range(1, len(log) + 1)), "the stored log is gapless"
    assert kinds[-1] == "succeeded" and kinds.count("recovered") == 2, kinds
    assert kinds.count("step") == NARRATED_STEPS, "each journal write logged once, refused ones never"
    seen = whole.seen()
    assert [seq for seq, _ in seen] == list(range(1, len(seen) + 1)), "no gap, no repeat, in order"
    assert seen == log, "the follower read exactly the stored log, to its terminal event"
    assert 0 < len(before_cut) < len(log), "the cut follower was killed midway"
    assert before_cut + resumed.seen() == log, "resuming after the last seq seen misses and repeats nothing"


async def _waiting_at_gate(app: rw.App, fleet: WorkerFleet, run_id: int, gate: int) -> Run | None:
    """The run, when its current claim is waiting at the gate of step `gate`."""
    run = await app.store.run_get(run_id)
    reached = fleet.events_by_run(f"gate-{gate}").get(run_id, [])
    if run.state is RunState.RUNNING and any(fence == run.fence for fence, _ in reached):
        return run
    return None


EMITTING_STEPS = 8
# The first owner dies right after step 2's journal write (its emits before it are then
# replayed); the second right after step 5's side effect, before its journal write (the
# emit before step 5 was made, but is not behind a journaled step: its mark finds it).
EMIT_KILLS = ("step.after_journal:step-2=kill", "step.after_side_effect:step-5=kill")


async def test_each_emit_is_in_the_log_once_across_two_sigkills(app: rw.App, fleet: WorkerFleet) -> None:
    """A run that emits before and after each step; its owner is SIGKILLed twice (crash
    points), each time the run is taken over and its code replayed from the top. The log
    holds each emit exactly once, in order, as the claim that first made it wrote it; the
    replayed emits returned their first seqs; a follower in another process sees each once."""
    handle = await app.submit(apps.emitting_steps, steps=EMITTING_STEPS)
    follower = fleet.follow(handle.id)
    for crash in EMIT_KILLS:
        armed = fleet.start(env={"RUNWRIGHT_CRASH_POINTS": crash})
        assert await armed.wait_exit(f"the worker armed with {crash} kills itself") == -signal.SIGKILL
    fleet.start()
    final = await wait_until(lambda: _done(app, handle.id), "the run ends")
    assert final.state is RunState.SUCCEEDED, f"the run ended {final.state}: {final.error}"
    assert (final.recoveries, final.fence) == (2, 3), "taken over twice"

    log = await app.store.event_list(EventListParams(handle.id))
    emits = [e for e in log if e.kind == "progress"]
    assert [(e.data["step"], e.data["phase"]) for e in emits] == [
        (i, phase) for i in range(EMITTING_STEPS) for phase in ("before", "after")], \
        "each emit once, in order"
    assert [e.data["fence"] for e in emits] == [1] * 5 + [2] * 6 + [3] * 5, \
        "each written by the claim that first made it"
    assert final.value() == [e.seq for e in emits], "a replayed emit returns its first seq"
    assert [e.seq for e in log] == list(range(1, len(log) + 1)), "the stored log is gapless"
    assert await follower.wait_exit() == 0, follower.err_path.read_text()
    assert follower.seen() == [(e.seq, e.kind) for e in log], "the follower saw each event once"


# -- 3. a zombie past its lease appends nothing -----------------------------------------

@pytest.mark.parametrize("stall_in", ["step", "emit"])
async def test_a_zombie_past_its_lease_appends_nothing(app: rw.App, fleet: WorkerFleet, store_url: str,
                                                       stall_in: str) -> None:
    """A worker (lease 2 s) stalls mid-run, between journaled steps, and is SIGSTOPped; another
    worker takes the run over and finishes it. Resumed, the zombie makes the write it was
    about to make (a step's journal write, or an event carrying its fence and pid): the
    store refuses it, and the journal and log hold nothing of the zombie's claim after
    the stall."""
    zombie = fleet.start(lease_s=2)
    handle = await app.submit(apps.stall_then_write, tag="zombie", stall_in=stall_in)
    await wait_until(lambda: handle.id in fleet.events_by_run("stalled"), "the run stalls its worker")
    stalled = await handle.refresh()
    zombie_fence = stalled.fence
    journal_before = await app.store.step_list(handle.id)
    log_before = await app.store.event_list(EventListParams(handle.id))
    assert [(s.name, s.fence) for s in journal_before] == [("before", zombie_fence)]

    await sigstop_outside_a_write(zombie, store_url)
    other = fleet.start()
    taken = await wait_until(lambda: _done(app, handle.id), "another worker takes the run over and ends it")
    assert taken.state is RunState.SUCCEEDED, f"the run ended {taken.state}: {taken.error}"
    assert taken.value() == {"fence": zombie_fence + 1, "pid": other.pid}, "finished by the other worker"
    assert (taken.fence, taken.recoveries) == (zombie_fence + 1, 1)
    journal_taken = await app.store.step_list(handle.id)
    log_taken = await app.store.event_list(EventListParams(handle.id))

    zombie.signal(signal.SIGCONT)
    fleet.release("zombie")  # the zombie's stalled attempt goes on, straight to its write
    answer = await wait_until(lambda: _store_answer(fleet, handle.id, zombie_fence),
                              "the zombie's write reaches the store")
    assert answer == "write-refused", "the store took the zombie's write"
    await wait_until(lambda: zombie.logged("lease lost", handle.id), "the zombie logs its lost lease")
    assert await zombie.stop() == 0, "the zombie stops cleanly (flushing anything still pending)"
    assert fleet.events_by_run("write-accepted")[handle.id] == [(zombie_fence + 1, other.pid)]

    journal = await app.store.step_list(handle.id)
    log = await app.store.event_list(EventListParams(handle.id))
    assert journal == journal_taken and log == log_taken, "a write of the zombie became durable"
    assert [s for s in journal if s.fence <= zombie_fence] == journal_before, \
        "of the zombie's claim, the journal holds only the step written before the stall"
    after_stall = journal[len(journal_before):]
    assert [s.fence for s in after_stall] == [zombie_fence + 1] * len(after_stall)
    assert [s.value()["pid"] for s in after_stall] == [other.pid] * len(after_stall)

    assert [(e.seq, e.kind) for e in log] == [(i, e.kind) for i, e in enumerate(log, 1)], "gapless"
    assert log[:len(log_before)] == log_before, "the log before the stall is untouched"
    later = log[len(log_before):]
    stalled_step = ["step"] if stall_in == "step" else []
    assert [e.kind for e in later] == ["recovered", "started", *stalled_step, "resumed", "step", "succeeded"]
    assert [e.data for e in later if e.kind == "resumed"] == [{"fence": zombie_fence + 1, "pid": other.pid}]
    from_zombie = [e for e in later if e.data.get("fence") == zombie_fence or e.data.get("pid") == zombie.pid]
    assert from_zombie == [], "events of the zombie's claim after the takeover"
    assert await other.stop() == 0


def _store_answer(fleet: WorkerFleet, run_id: int, fence: int) -> str | None:
    """How the store answered the write that apps.write_surely made under `fence`."""
    for answer in ("write-refused", "write-accepted"):
        if any(f == fence for f, _ in fleet.events_by_run(answer).get(run_id, [])):
            return answer
    return None


# -- 4. a durable sleep across a restart of every worker --------------------------------

async def test_a_durable_sleep_outlives_a_restart_of_every_worker(app: rw.App, fleet: WorkerFleet) -> None:
    """A run does a step, sleeps 3 s, does another step. Parked, it holds no worker (it is
    queued, owned by none); every worker is stopped with SIGTERM meanwhile, and new ones
    finish it: the second step runs after the journaled wake time, each step once."""
    old = [fleet.start(), fleet.start()]
    handle = await app.submit(apps.nap, seconds=3)
    parked = await wait_until(lambda: _parked(app, handle.id), "the run parks for its sleep")
    journal = await app.store.step_list(handle.id)
    assert [s.name for s in journal] == ["before", "sleep"]
    until = journal[1].value()["until"]
    assert (parked.state, parked.owner) == (RunState.QUEUED, None), "a parked run holds no worker slot"
    assert parked.run_at == until, "it comes due at the journaled wake time"

    for worker in old:
        await worker.wait_started()  # the run may have parked before the other was up
        assert await worker.stop() == 0, f"exit code of {worker.name} after SIGTERM"
    after_stop = await handle.refresh()
    assert (after_stop.state, after_stop.owner, after_stop.run_at, after_stop.last_seq) == (
        RunState.QUEUED, None, until, parked.last_seq), "stopping every worker left the parked run as it was"

    new = [fleet.start(), fleet.start()]
    final = await wait_until(lambda: _done(app, handle.id), "the run wakes and ends")
    assert final.state is RunState.SUCCEEDED, f"the run ended {final.state}: {final.error}"
    woke = final.value()
    print(f"the second step ran {woke['at'] - until:.3f} s after the wake time")
    assert woke["at"] >= until, "the second step ran before the wake time"
    assert woke["pid"] in {w.pid for w in new}, "the second step ran in a worker started after the restart"
    assert (final.attempt, final.recoveries, final.fence) == (1, 0, 2), "parked and resumed, never taken over"
    assert fleet.events_by_run("before")[handle.id] in ([(1, w.pid)] for w in old), "first step: once"
    assert fleet.events_by_run("after")[handle.id] == [(2, woke["pid"])], "second step: once"
    kinds = [e.kind for e in await app.store.event_list(EventListParams(handle.id))]
    assert kinds == ["submitted", "started", "step", "step", "parked", "started", "step", "succeeded"]
    for worker in new:
        await worker.wait_started()
        assert await worker.stop() == 0


async def _parked(app: rw.App, run_id: int) -> Run | None:
    """The run once it parked (or ended: then the assertions that follow say what went wrong).
    The log is read first: a run read before the `parked` event may still show it running."""
    parked = any(e.kind == "parked" for e in await app.store.event_list(EventListParams(run_id)))
    run = await app.store.run_get(run_id)
    return run if parked or run.done else None


# -- 5. fan-out and fan-in of 50 children across a SIGKILL -------------------------------

CHILDREN = 50
HELD_CHILD = 20  # in flight when its worker is killed


async def test_a_parent_gathers_50_children_across_a_sigkill(app: rw.App, fleet: WorkerFleet) -> None:
    """A parent submits 50 children (50-100 ms each) and gathers their sum, on 3 workers;
    the worker running child 20 is SIGKILLed while it does. The sum is right; there are
    exactly 50 children, one per submit of the parent; each executed once, except children
    in flight on the killed worker, which ran again under their next claim; the parent
    parked while waiting."""
    for _ in range(3):
        fleet.start(concurrency=4)
    parent = await app.submit(apps.fan_out, count=CHILDREN, hold_n=HELD_CHILD)
    held = await wait_until(lambda: fleet.events_by_run("held"), f"child {HELD_CHILD} is in flight")
    ((held_id, [(held_fence, _)]),) = held.items()
    victim = await _kill_owner(app, fleet, await app.store.run_get(held_id))
    fleet.start(concurrency=4)
    fleet.release(f"child-{held_id}")  # a later start is not held anyway; this only tidies up

    final = await wait_until(lambda: _done(app, parent.id), "the parent ends")
    assert final.state is RunState.SUCCEEDED, f"the parent ended {final.state}: {final.error}"
    assert final.value() == sum(n * n for n in range(CHILDREN))

    children = await app.store.run_list(RunListParams(task="child", limit=10 * CHILDREN))
    assert len(children) == CHILDREN, "exactly one child per submit, even if the parent was replayed"
    assert {c.parent_id for c in children} == {parent.id}
    assert len({c.key for c in children}) == CHILDREN, "distinct keys"
    assert {c.state for c in children} == {RunState.SUCCEEDED}
    by_n = sorted(children, key=lambda c: c.arguments()["n"])
    assert [c.arguments()["n"] for c in by_n] == list(range(CHILDREN))
    journal = await app.store.step_list(parent.id)
    assert [(s.position, s.name, s.value()) for s in journal] == [
        (n, "submit:child", c.id) for n, c in enumerate(by_n)], "the parent journaled each child once"

    executions = fleet.events_by_run("child")
    for c in children:
        ran = sorted(executions[c.id])
        assert len([e for e in ran if e[0] == c.fence]) == 1, f"child {c.id}: {ran}, fence {c.fence}"
        # A child ran before its last claim only on the killed worker, once, and then was
        # taken over (each claim of a child after its first is a takeover).
        earlier = [e for e in ran if e[0] != c.fence]
        assert earlier in ([], [(c.fence - 1, victim.pid)]), \
            f"child {c.id}: executions {ran}, fence {c.fence}"
        assert c.recoveries == c.fence - 1 <= 1, f"child {c.id}: fence {c.fence}, recoveries {c.recoveries}"
    (held_child,) = [c for c in children if c.id == held_id]
    assert sorted(executions[held_id])[0] == (held_fence, victim.pid)
    assert held_child.fence == held_fence + 1, "the killed child ran again under its next claim"
    twice = sorted(c.arguments()["n"] for c in children if len(executions[c.id]) == 2)
    print(f"children executed twice: {twice}; parent taken over {final.recoveries} times")

    kinds = [e.kind for e in await app.store.event_list(EventListParams(parent.id))]
    assert "parked" in kinds, "the parent parked while its children ran"
    assert kinds[-1] == "succeeded"

