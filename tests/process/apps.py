"""The app that worker subprocesses load as `tests.process.apps:app`.

Tasks leave a trace in a ledger directory (RUNWRIGHT_TEST_LEDGER, one file per process,
one line per event: `event run_id fence pid`), so a test can see every execution, not
only the one the store recorded. The `hold*` tasks block on their first start only (a
marker file per run records that start), which puts a run surely in flight for a test to
kill, stop or drain its worker; any later start returns at once.

The durable tasks (test_durable.py) log each execution of a step or child run the same
way (`step-<i>`, `child`), so a test can tell a journaled execution from one whose
worker died before its journal write (same step, another fence). Gates and stalls put a
run surely at a chosen point for the test to act: a gate waits asynchronously for a file
(gate_file); a stall blocks until released (stall_on_first_start).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Awaitable

import runwright as rw

# RUNWRIGHT_URL is set by `runwright worker --url` before this module is imported.
app = rw.App()

LEDGER_ENV = "RUNWRIGHT_TEST_LEDGER"
HOLD_LIMIT_S = 300.0  # a held run gives up waiting eventually, so nothing hangs forever (past the
# slowest test that holds runs on a loaded machine: the state machine's CLI face took 2 min)


def ledger_dir() -> Path:
    return Path(os.environ[LEDGER_ENV])


def release_file(directory: Path, tag: str) -> Path:
    """Creating this file lets every held first start of runs tagged `tag` finish."""
    return directory / f"release-{tag}"


def note(event: str, ctx: rw.Context) -> None:
    """Append one ledger line; flushed on close, so a SIGKILL right after cannot lose it."""
    with open(ledger_dir() / f"{os.getpid()}.log", "a") as out:
        out.write(f"{event} {ctx.run_id} {ctx.fence} {os.getpid()}\n")


def first_start(ctx: rw.Context) -> bool:
    """True for the first start of this run in any process (O_EXCL makes it race-free)."""
    try:
        os.close(os.open(ledger_dir() / f"started-{ctx.run_id}", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


@app.task(retries=0)
async def record(ctx: rw.Context, n: int) -> int:
    """A no-op that leaves one ledger line per execution."""
    note("ran", ctx)
    return n


@app.task(retries=0)
async def keep(ctx: rw.Context, value):  # no hint: any JSON value, stored as given
    """Returns its argument, whatever it is: a task whose arguments are not type-checked."""
    return value


@app.task(retries=0)
async def hold(ctx: rw.Context, tag: str) -> dict:
    """First start: wait (asynchronously, so it can be cancelled) for the release file."""
    note("start", ctx)
    if first_start(ctx):
        release = release_file(ledger_dir(), tag)
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not release.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    note("finished", ctx)
    return {"pid": os.getpid(), "fence": ctx.fence}


@app.task(retries=0, concurrency=rw.Limit(key="{args.customer}", max=1, name="one-per-customer"))
async def hold_limited(ctx: rw.Context, tag: str, customer: str) -> dict:
    """`hold`, at most one run of a customer at once across the fleet."""
    return await hold(ctx, tag)


# Fair shares (test_concurrency_limit_tenants.py): at most TENANT_MAX runs of a tenant at
# once; a run lasts a few milliseconds, so a tenant's runs pile up against its limit.
TENANT_MAX = 4


@app.task(retries=0, concurrency=rw.Limit(key="{tenant}", max=TENANT_MAX, name="per-tenant"))
async def per_tenant(ctx: rw.Context, n: int) -> None:
    await asyncio.sleep(0.002)


# Rates per key (test_rate_limit_race.py): at most RATE_MAX of cost started in any
# RATE_PER_S seconds per customer; a run's cost is its argument.
RATE_MAX, RATE_PER_S = 4, 0.5


@app.task(retries=0, rate=rw.Rate(key="{args.customer}", max=RATE_MAX, per_s=RATE_PER_S, cost="{args.cost}",
                                  name="crm-rate"))
async def rated(ctx: rw.Context, customer: str, cost: int, n: int) -> None:
    await asyncio.sleep(0.001)


@app.task(retries=0)
def hold_sync(ctx: rw.Context, tag: str) -> str:
    """First start: block a thread until the release file appears. A thread cannot be
    cancelled, so a stalled worker's attempt surely reaches its `return` once it resumes,
    whether its worker then tries to write the result or has already abandoned the run;
    the "zombie-finished" line marks that moment."""
    note("start", ctx)
    if not first_start(ctx):
        note("finished", ctx)
        return f"from pid {os.getpid()}"
    release = release_file(ledger_dir(), tag)
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    note("zombie-finished", ctx)
    return f"from pid {os.getpid()}"


# -- durable execution (test_durable.py) -----------------------------------------------

def gate_file(directory: Path, run_id: int, position: int) -> Path:
    """Creating this file opens the gate that step `position` of run `run_id` waits at."""
    return directory / f"gate-{run_id}-{position}"


def identity(ctx: rw.Context) -> dict:
    """Who is executing: the claim (fence) and the process."""
    return {"fence": ctx.fence, "pid": os.getpid()}


async def wait_for_file(path: Path) -> None:
    """Asynchronously, so that the run stays cancellable while it waits."""
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not path.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


async def ledgered_step(ctx: rw.Context, i: int, min_s: float, max_s: float, gated: bool) -> int:
    """Step `i` of a run: its side effect (the ledger line `step-<i>`) comes first, then
    the work, so a kill during the work leaves an execution that the journal never saw."""
    note(f"step-{i}", ctx)
    if gated:
        note(f"gate-{i}", ctx)  # reached: the test may now act while the step waits
        await wait_for_file(gate_file(ledger_dir(), ctx.run_id, i))
    if max_s > 0:
        await asyncio.sleep(random.uniform(min_s, max_s))
    return i


@app.task(retries=0)
async def steps_with_ledger(ctx: rw.Context, steps: int, min_s: float = 0.0, max_s: float = 0.0,
                            gate: int = -1) -> int:
    """`steps` journaled steps, each taking between min_s and max_s; returns the sum of 0..steps-1.
    Step `gate` waits at its gate (see gate_file) until the test opens it."""
    total = 0
    for i in range(steps):
        total += await ctx.step(f"step-{i}", ledgered_step, ctx, i, min_s, max_s, i == gate)
    return total


@app.task(retries=0)
async def narrated_steps(ctx: rw.Context, steps: int, gates: list[int]) -> int:
    """Journaled steps, each followed by a `progress` event (appended once: a replay
    passes over it). A step in `gates` waits at its gate (see gate_file) until the test
    opens it."""
    for i in range(steps):
        await ctx.step(f"step-{i}", ledgered_step, ctx, i, 0.0, 0.0, i in gates)
        await ctx.emit("progress", {"step": i, **identity(ctx)})
    return steps


@app.task(retries=0)
async def emitting_steps(ctx: rw.Context, steps: int) -> list[int]:
    """Journaled steps with an emit before and after each (between durable operations,
    so part of the run's history: appended once, however often a replay makes them).
    Returns the seqs the emits returned, in order (on a replay: the ones first given)."""
    seqs = []
    for i in range(steps):
        seqs.append(await ctx.emit("progress", {"step": i, "phase": "before", **identity(ctx)}))
        await ctx.step(f"step-{i}", ledgered_step, ctx, i, 0.0, 0.0, False)
        seqs.append(await ctx.emit("progress", {"step": i, "phase": "after", **identity(ctx)}))
    return seqs


def stall_on_first_start(ctx: rw.Context, tag: str) -> dict:
    """First start of the run: block until the release file appears; later starts pass at
    once. Returns who executed it. Called in a task's body it blocks the worker's whole
    event loop; as a step's function it may run in a thread, and the worker may notice
    meanwhile that it lost its lease: hence write_surely for the write that follows."""
    if first_start(ctx):
        note("stalled", ctx)
        release = release_file(ledger_dir(), tag)
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return identity(ctx)


async def write_surely(ctx: rw.Context, write: Awaitable[object]) -> None:
    """Make the write reach the store even if the worker cancels the run meanwhile (a
    resumed zombie's lost-lease check may win that race), and leave in the ledger whether
    the store took it (`write-accepted`) or the fence refused it (`write-refused`)."""

    async def attempt() -> rw.LeaseLost | None:
        try:
            await write
        except rw.LeaseLost as exc:
            note("write-refused", ctx)
            return exc
        note("write-accepted", ctx)
        return None

    refused = await asyncio.shield(asyncio.ensure_future(attempt()))
    if refused is not None:
        raise refused


@app.task(retries=0)
async def stall_then_write(ctx: rw.Context, tag: str, stall_in: str) -> dict:
    """A journaled step, then a stall on the first start (see stall_on_first_start) right
    before a write: the journal write of the stalled step (`stall_in="step"`), or an event
    carrying who wrote it (`stall_in="emit"`). Then one more step."""
    await ctx.step("before", identity, ctx)
    if stall_in == "step":
        await write_surely(ctx, ctx.step("stalled", stall_on_first_start, ctx, tag))
        await ctx.emit("resumed", identity(ctx))
    else:
        stall_on_first_start(ctx, tag)
        await write_surely(ctx, ctx.emit("resumed", identity(ctx)))
    await ctx.step("after", identity, ctx)
    return identity(ctx)


@app.task(retries=0)
async def block_loop(ctx: rw.Context, tag: str) -> dict:
    """First start: block the worker's whole event loop until released (no await in
    between: no task of the loop runs meanwhile, the heartbeat and renewals neither)."""
    return stall_on_first_start(ctx, tag)


def stamped(ctx: rw.Context, name: str) -> dict:
    note(name, ctx)
    return {"at": time.time(), **identity(ctx)}


@app.task(retries=0)
async def nap(ctx: rw.Context, seconds: float) -> dict:
    """A step, a durable sleep, a step; each step records when and by whom it ran."""
    await ctx.step("before", stamped, ctx, "before")
    await ctx.sleep(seconds)
    return await ctx.step("after", stamped, ctx, "after")


@app.task(retries=0)
async def child(ctx: rw.Context, n: int, hold_n: int) -> int:
    """One child of fan_out: 50-100 ms of work; child `hold_n` holds its first start until
    released with tag `child-<its run id>`, a run surely in flight for the test to kill."""
    note("child", ctx)
    if n == hold_n and first_start(ctx):
        note("held", ctx)
        await wait_for_file(release_file(ledger_dir(), f"child-{ctx.run_id}"))
    await asyncio.sleep(random.uniform(0.05, 0.1))
    return n * n


@app.task(retries=0)
async def fan_out(ctx: rw.Context, count: int, hold_n: int) -> int:
    """Submit `count` children, park until they all ended, return the sum of their values."""
    children = [await ctx.submit(child, n=i, hold_n=hold_n) for i in range(count)]
    return sum(await ctx.gather(*children))


@app.task(retries=0)
async def ask_deploy(ctx: rw.Context, target: str) -> dict:
    """A step, then a question to a person (parks the run), then a step with the answer."""
    await ctx.step("prepare", _noted, ctx, "prepare")
    approved = await ctx.ask(f"Deploy {target}?", schema=bool)
    await ctx.step("deploy", _noted, ctx, "deploy")
    return {"target": target, "approved": approved, "pid": os.getpid()}


@app.task(retries=0)
async def await_payment(ctx: rw.Context, order: str) -> dict:
    """A step, then a wait for the signal "payment" (parks the run), then a step with it."""
    await ctx.step("prepare", _noted, ctx, "prepare")
    await ctx.set_state("stage", "awaiting payment")
    payment = await ctx.wait_signal("payment")
    await ctx.set_state("stage", "charging")
    await ctx.step("charge", _noted, ctx, "charge")
    return {"order": order, "payment": payment, "pid": os.getpid()}


@await_payment.query
def stage(view: rw.RunView, shout: bool = False) -> dict:
    """Where the order stands, read from the run's published state (no worker involved)."""
    stage = view.state.get("stage", "not started")
    return {"order": view.run.arguments()["order"], "stage": stage.upper() if shout else stage}


@app.task(retries=0)
async def gather_signals(ctx: rw.Context, count: int) -> list:
    """The payloads of the first `count` signals "msg", in the order taken."""
    got = []
    async for payload in ctx.signals("msg"):
        got.append(payload)
        if len(got) == count:
            return got
    return got


@app.task(retries=0)
async def catch_ticks(ctx: rw.Context, count: int) -> dict:
    """The first `count` signals "tick", each taken by a short wait (20 ms, within the
    linger: a wait that times out ends its linger and journals its timeout, raced by the
    sends), in the order taken, and how many waits timed out."""
    got: list = []
    timeouts = 0
    while len(got) < count:
        try:
            got.append(await ctx.wait_signal("tick", timeout_s=0.02))
        except TimeoutError:
            timeouts += 1
    return {"got": got, "timeouts": timeouts}


@app.task(retries=0)
async def priced_cart(ctx: rw.Context, rounds: int) -> dict:
    """Apply `rounds` updates "discount" (each a journaled step noted in the ledger), then end."""
    total = 100
    for _ in range(rounds):
        total = await ctx.handle_update("discount", lambda pct, before=total: _discounted(ctx, before, pct))
        await ctx.set_state("total", total)
    return {"total": total}


def _discounted(ctx: rw.Context, total: int, pct: int) -> int:
    note("discount", ctx)
    return total - total * pct // 100


@priced_cart.validate_update("discount")
def _check_discount(view: rw.RunView, pct: object) -> None:
    if not isinstance(pct, int) or not 0 < pct <= 50:
        raise ValueError(f"a discount is a whole percent in 1..50, got {pct!r}")


@app.task(retries=0)
async def await_doc(ctx: rw.Context, doc_id: str, timeout_s: float | None = None) -> dict:
    """A step, then a wait for event "doc.processed" of this document (parks the run), then
    a step with it."""
    await ctx.step("prepare", _noted, ctx, "prepare")
    try:
        event = await ctx.wait_event("doc.processed", match={"doc_id": doc_id}, timeout_s=timeout_s)
    except TimeoutError:
        event = "timeout"
    await ctx.step("after", _noted, ctx, "after")
    return {"doc_id": doc_id, "event": event, "pid": os.getpid()}


@app.task(retries=0, on_event="doc.processed")
async def index_doc(ctx: rw.Context, event: dict) -> dict:
    """Started by every event "doc.processed", given its data."""
    await ctx.step("index", _noted, ctx, "index")
    return {"indexed": event.get("doc_id")}


def _noted(ctx: rw.Context, name: str) -> str:
    note(name, ctx)
    return name


# -- following over SSE (tests/api/test_sse.py) -----------------------------------------

@app.task(retries=1, backoff=rw.Backoff(base_s=0.05, jitter=0))
async def doomed(ctx: rw.Context) -> None:
    """Fails on every attempt: retried once, then dead (and dead again after a retry)."""
    await ctx.emit("trying", {"attempt": ctx.attempt})
    raise RuntimeError("doomed")


@app.task(retries=0)
async def chatter(ctx: rw.Context, count: int) -> int:
    """`count` events, then wait at gate 0 (gate_file(run, 0)) before ending."""
    for i in range(count):
        await ctx.emit("tick", {"i": i})
    note("chattered", ctx)
    await wait_for_file(gate_file(ledger_dir(), ctx.run_id, 0))
    return count


SPAWN_LIMIT = 5_000  # only so that a spawner whose cancel never came ends eventually


@app.task(retries=0)
async def spawned(ctx: rw.Context, n: int) -> int:
    """A child of `spawner`: its body leaves the ledger line `spawned-ran`."""
    note("spawned-ran", ctx)
    return n


@app.task(retries=0)
async def spawner(ctx: rw.Context) -> int:
    """Submit `spawned` children to the queue "kids", one after another, until stopped
    (a cancel); the ledger line `spawning` says its first child was submitted."""
    for n in range(SPAWN_LIMIT):
        await ctx.submit(spawned, n, queue="kids")
        if n == 0:
            note("spawning", ctx)
    return SPAWN_LIMIT
