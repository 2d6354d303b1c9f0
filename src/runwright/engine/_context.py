"""The Context a task receives: who it is, and the durable operations of a run.

A run's function is executed again from the top after a takeover, a retry or a park.
Each durable operation (`step`, `sleep`, `submit`) takes the next position in the run's
journal: a position already journaled returns its recorded outcome without running
anything; the first unjournaled one runs for real and is journaled (fenced) before the
function goes on. So a step that completed never runs twice, across any number of crashes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import json
import time
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from dataclasses import replace
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Mapping,
    Sequence,
    TypeVar,
    overload,
)

from ..core._journal import (
    PATCH_PREFIX,
    SNAPSHOT,
    STATE_PREFIX,
    TERMINAL_EVENT_KINDS,
    StepRecord,
    check_patch_id,
)
from ..core._questions import schema_of
from ..core._resilience import through_blinks
from ..core._signals import UPDATE_PREFIX, check_signal_name, taken_outcome
from ..core._waiting import wait_set
from ..errors import ChildFailed, LeaseLost, NonDeterminismError, OutcomeUnknown, StepFailed
from ..observe._spans import active, span
from ..observe._trace_context import RunTrace
from ..runs import Run, WaitReason, outcome_of
from ..store._event_params import EventWaitListParams
from ..store._hub import events_topic
from ..store._params import (
    EventAppendParams,
    QuestionListParams,
    QuestionOpenParams,
    SignalTaken,
    SignalTakeParams,
    StepRecordParams,
    ThreadForgetParams,
)
from ..tasks._blocking import in_thread
from ..tasks._retry import RetryPolicy
from ..tasks._serde import due_at, encode, encode_error, finite
from ..tasks._submission import Submission, check_key_reuse, check_on_conflict, insert_params
from ._crashpoints import crash_point
from ._events import wait_event as _wait_event
from ._parking import Interrupted, Park, Paused, RunControl
from ._transactions import IN_TRANSACTION, TransactionBlock, call_in_transaction

if TYPE_CHECKING:
    from ..tasks._specs import TaskSpec
    from ._runtime import Runtime

__all__ = ["ChildRun", "Context", "current_context"]

T = TypeVar("T")

# A sleep this short is waited out in the slot: parking would cost more than it frees.
INLINE_SLEEP_S = 0.05
# A parent waiting on children is woken by the first child that ends; this re-check only
# bounds the wait if that wake-up were ever lost.
CHILD_RECHECK_S = 60.0
# A run waiting for an answer is woken by the answer itself, in the same write; this
# re-check only bounds the wait if that wake-up were ever lost.
ANSWER_RECHECK_S = 3600.0
# The most questions of one run `patched` and a replay read to find one asked where it stands.
QUESTIONS_READ = 10_000
# A run waiting for a signal is woken by the send itself, in the same write; this re-check
# only bounds the wait if that wake-up were ever lost (and ends no timeout early).
SIGNAL_RECHECK_S = 3600.0
# Before it parks, a wait for a signal holds its slot this long for one to come: a reply in
# a conversation arrives within a follow's latency instead of a park, a claim and a replay.
SIGNAL_LINGER_S = 0.25
# Set while a step's function runs: an emit there belongs to that execution of the step
# (made again whenever the step runs again, as a model call's streamed tokens are), not to
# the run's history between durable operations, which is appended once.
_IN_STEP: ContextVar[bool] = ContextVar("runwright_in_step", default=False)
# The Context of the run whose function runs in this asyncio task (each run has its own):
# what an adapter of another agent framework reaches for when the user's task calls it
# without handing it `ctx` (see runwright.integrations).
CURRENT: ContextVar[Context | None] = ContextVar("runwright_current_context", default=None)
RESERVED_KINDS = TERMINAL_EVENT_KINDS | {
    "submitted", "started", "retrying", "released", "parked", "recovered", "requeued", "retried",
    "cancel_requested", "step", "asked", "answered", "signalled", "withdrawn", "updated"}


class Context:
    """Given to a task whose first parameter is `ctx` (or annotated `rw.Context`).

    `runtime` is what the worker was given (registry, store, clock, limits): a task that
    submits children or an agent that keeps a thread reaches them through it."""

    def __init__(self, runtime: Runtime, run: Run, worker_id: int, journal: Sequence[StepRecord] = (),
                 control: RunControl | None = None, *, dry: bool = False) -> None:
        self.runtime = runtime
        self.run = run
        self.worker_id = worker_id
        self.control = control or RunControl(run.interrupt)
        self._journal = {record.position: record for record in journal}
        # The journal may start at a snapshot (`step_list_resumable`): what precedes it is
        # read only if the code asks for it, i.e. replays from the top without `restore`.
        self._base = min(self._journal, default=0)
        # Where the journal this attempt started from ends: the one position where the run
        # may wait on what it registered there but its journal does not hold yet (a question,
        # journaled once answered; an event wait, journaled once its event is taken).
        self._end = max(self._journal, default=-1) + 1
        self._position = 0
        self._trace: RunTrace | None = None
        # The emits made so far before the durable operation at `_emit_position`.
        self._emit_position, self._emits_here = 0, 0
        self._patches: dict[str, bool] = {}  # patched()'s answers, decided once per run
        # A dry replay (engine._replayer): the journal is whole, and the first operation it
        # does not hold ends the replay instead of running; emits write nothing.
        self._dry = dry

    @property
    def trace(self) -> RunTrace:
        """The run's trace: the ids of its spans, the same on every machine."""
        if self._trace is None:
            self._trace = RunTrace.of(self.run)
        return self._trace

    def _span(self, name: str, position: int) -> AbstractContextManager[Any]:
        """The span of the durable operation at `position` of this attempt, under the
        attempt's span (names and places only: never arguments or results)."""
        if not active():
            return nullcontext()
        trace, fence = self.trace, self.run.fence
        return span(name, trace, trace.step_span_id(fence, position), trace.attempt_span_id(fence), {
            "runwright.run.id": self.run.id, "runwright.step.name": name,
            "runwright.step.position": position, "runwright.attempt": self.run.attempt,
            "runwright.fence": fence})

    @property
    def run_id(self) -> int:
        return self.run.id

    @property
    def key(self) -> str:
        return self.run.key

    @property
    def attempt(self) -> int:
        """1 for the first attempt; a takeover continues the same attempt number."""
        return self.run.attempt

    @property
    def cancelled(self) -> bool:
        """True once the worker has asked this run to stop (a cancel, a lost lease, a
        shutdown). A coroutine is stopped for it; a plain function running in a thread
        cannot be, and should look at this between units of work and return early."""
        return self.control.stopping

    @property
    def fence(self) -> int:
        """The claim's token: every write of this attempt carries it."""
        return self.run.fence

    # -- the journal ----------------------------------------------------------------

    async def _next(self, name: str) -> tuple[int, StepRecord | None]:
        """Take the next position; the journaled record there, if any, must bear `name`."""
        if IN_TRANSACTION.get():
            raise RuntimeError(f"run {self.run.id}: {name!r} inside a transaction: a transaction's "
                               f"body writes through its connection only; put other durable "
                               f"operations before or after it")
        position = self._position
        if position < self._base:
            await self._read_whole_journal()
        self._position += 1
        record = self._journal.get(position)
        if record is None and self._dry:
            raise DryReplayEnd(position, name)
        if record is not None and record.name != name:
            raise NonDeterminismError(
                f"run {self.run.id}: step #{position} is {name!r} in this replay, but the journal "
                f"holds {record.name!r} there; the task's code or inputs changed its steps")
        return position, record

    async def _read_whole_journal(self) -> None:
        journal = await through_blinks(self.runtime.store.step_list, self.run.id)
        self._journal = {record.position: record for record in journal}
        self._base = 0

    async def _record(self, position: int, name: str, status: str, result: str | None = None,
                      error: str | None = None) -> None:
        recorded = await self.runtime.journal.record(StepRecordParams(
            self.run.id, self.run.fence, position, name, status, result, error))
        if not recorded:
            raise LeaseLost(self.run.id, self.run.fence)

    @property
    def interrupt_requested(self) -> str | None:
        """"interrupt" or "rollback" once a newer run on this run's thread asked it to stop."""
        return self.control.interrupt

    @property
    def replaying(self) -> bool:
        """True while the next durable operation is already journaled (a replay)."""
        return self._position < self._base or self._position in self._journal

    @property
    def dry(self) -> bool:
        """True in a dry replay (`runwright replay`): the code runs on the journal, and
        whatever it would write outside a journaled step it must leave unwritten."""
        return self._dry

    async def stop_if_interrupted(self, at_boundary: bool = True) -> None:
        """At a real step boundary (not during replay): end the run `interrupted` if asked.
        With rollback, what this run added to its thread is dropped first. Inside a step
        (`at_boundary=False`, from `interruptible`), its position is taken but unjournaled."""
        mode = self.control.interrupt
        if mode is None and at_boundary and self.control.pause and not self.replaying:
            raise Paused()
        if mode is None or (at_boundary and self.replaying):
            return
        if mode == "rollback" and self.run.thread is not None:
            forget = ThreadForgetParams(self.run.id, self.run.fence)
            if not await through_blinks(self.runtime.store.thread_forget_run, forget):
                raise LeaseLost(self.run.id, self.run.fence)
        raise Interrupted(mode)

    async def interruptible(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable`, cut short if a newer run on this run's thread interrupts it:
        then it is cancelled (a model call's HTTP request is dropped), nothing of it is
        kept, and the run stops as at a step boundary (`Interrupted`). Use it for a long
        wait inside a step whose partial outcome is worthless, as the agent does for each
        model call."""
        await self.stop_if_interrupted()
        work = asyncio.ensure_future(awaitable)
        interrupt = asyncio.ensure_future(self.control.wait_interrupt())
        try:
            await asyncio.wait((work, interrupt), return_when=asyncio.FIRST_COMPLETED)
            if work.done():
                return work.result()
        finally:
            for pending in (work, interrupt):
                pending.cancel()
            await asyncio.gather(work, interrupt, return_exceptions=True)
        await self.stop_if_interrupted(at_boundary=False)
        raise AssertionError("an interrupt was requested, so stop_if_interrupted raised")

    @property
    def next_position(self) -> int:
        """The journal position the next durable operation will take (stable on replay)."""
        return self._position

    async def step(self, name: str, fn: Callable[..., Any], *args: Any,
                   retry: RetryPolicy | int | None = None, at_most_once: bool = False,
                   **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` once for this run, journal its result, and return it.
        A coroutine function runs on the loop, a plain function in a thread.

        On replay the journaled result is returned without calling `fn`. `retry` (a count
        or a RetryPolicy) retries the call in place with backoff. A final error (FinalError,
        `give_up_on`, outside `retry_on`) is journaled and raised as StepFailed, on every
        replay too; any other error is not journaled, so the run's own retry runs the step
        again. The result must serialize to JSON: if it does not, the step fails clearly
        and nothing is journaled.

        `at_most_once=True`: a fenced "started" mark is journaled before the call; if the
        worker dies mid-call, the call is never made again and this step raises
        OutcomeUnknown (on every replay). No in-place retries then: a retry could be a
        second call.
        """
        if name == SNAPSHOT:
            raise ValueError(f"{SNAPSHOT!r} is the name of ctx.snapshot's entries; give the step another")
        await self.stop_if_interrupted()
        position, record = await self._next(name)
        if record is not None and record.status == "started":
            return await self._outcome_unknown(position, name)
        if record is not None:
            return _replay(record)
        if at_most_once:
            await self._record(position, name, "started")
            crash_point("step.after_started_mark", name)
            retry = 0
        policy = RetryPolicy(retries=retry) if isinstance(retry, int) else retry or RetryPolicy(0)
        with self._span(name, position):
            try:
                value = await _step_body(fn, args, kwargs, policy)
            except Exception as exc:
                if not policy.is_final(exc):
                    raise
                crash_point("step.after_side_effect", name)
                detail = encode_error(exc)
                await self._record(position, name, "failed", error=detail)
                raise StepFailed(name, position, json.loads(detail)) from exc
            result = await self.runtime.limits.stored(value, f"result of step {name!r}")
            crash_point("step.after_side_effect", name)
            await self._record(position, name, "done", result=result)
        crash_point("step.after_journal", name)
        return value

    # -- transactional steps --------------------------------------------------------

    @overload
    def transaction(self, name: str = "transaction", /) -> TransactionBlock: ...

    @overload
    def transaction(self, name: str, fn: Callable[..., Awaitable[T]], /, *args: Any, connection: Any = None,
                    **kwargs: Any) -> Awaitable[T]: ...

    def transaction(self, name: str = "transaction", fn: Callable[..., Awaitable[Any]] | None = None,
                    /, *args: Any, connection: Any = None,
                    **kwargs: Any) -> TransactionBlock | Awaitable[Any]:
        """A step whose writes to the application's own tables commit with its journal
        entry, in one transaction of the store's database (PostgreSQL: an asyncpg
        connection; SQLite: asyncpg's calls, `$1` placeholders): exactly-once in that
        database, even across takeovers; a zombie's commit is refused by its fence.
        `await ctx.transaction(name, fn, *args)` calls `fn(tx, *args)` and returns (and on
        replay, without calling it, returns again) what it returned. `async with
        ctx.transaction(name) as tx:` commits the block; a replay runs it again in a
        transaction that is rolled back. `connection=` (the call form only): your own open
        transaction on the store's database instead (asyncpg, psycopg 3, SQLAlchemy's
        AsyncConnection or AsyncSession; sqlite3 or aiosqlite), which `fn` gets as `tx`:
        the entry is written in it last, and your commit commits both. Not on Redis
        (TransactionsUnsupported, final)."""
        if fn is None:
            if connection is not None:
                raise TypeError("ctx.transaction(name, connection=...) takes the call form only: "
                                "ctx.transaction(name, fn, *args, connection=conn); a replayed block "
                                "could not be taken back out of your transaction")
            return TransactionBlock(self, name)
        return call_in_transaction(self, name, fn, args, kwargs, connection)

    async def _durable_position(self, name: str) -> tuple[int, StepRecord | None]:
        """An interrupt check at the boundary, then the next position (as `step` takes it)."""
        if name == SNAPSHOT:
            raise ValueError(f"{SNAPSHOT!r} is the name of ctx.snapshot's entries; give the step another")
        await self.stop_if_interrupted()
        return await self._next(name)

    async def _outcome_unknown(self, position: int, name: str) -> Any:
        """A started mark with no outcome: journal that the outcome is unknown, and raise."""
        error = {"type": "OutcomeUnknown",
                 "message": "the call was started, but its worker stopped before recording how "
                            "it ended; being at-most-once, it is not made again"}
        await self._record(position, name, "failed", error=json.dumps(error))
        raise OutcomeUnknown(name, position, error)

    # -- snapshots: bounded replay --------------------------------------------------

    async def snapshot(self, state: Any) -> None:
        """Save `state` (JSON), all that the code needs to go on from here. A resume whose
        function starts with `ctx.restore()` gets it back and replays only what came
        after, so a run of thousands of steps resumes in the time of its last few. Fenced
        and journaled like a step (a replay passes over it)."""
        await self.stop_if_interrupted()
        # Encoded before the position is taken: a state over the payload limit raises
        # PayloadTooLarge and takes no position, so a caller may skip that snapshot.
        result = await self.runtime.limits.stored({"state": state}, "a snapshot")
        position, record = await self._next(SNAPSHOT)
        if record is None:
            await self._record(position, SNAPSHOT, "done", result=result)

    async def restore(self) -> Any:
        """The state of this run's last snapshot, going on from right after it; None when
        it has none (then nothing is skipped). Call it first, before any other durable
        operation: the code from there on must be what follows the `ctx.snapshot` that
        saved the state."""
        if self._position != 0:
            raise RuntimeError("ctx.restore() must come before any other durable operation of the run")
        done = [r for r in self._journal.values() if r.name == SNAPSHOT and r.status == "done"]
        if not done:
            return None
        last = max(done, key=lambda r: r.position)
        self._position = last.position + 1
        return last.value()["state"]

    # -- durable timers -------------------------------------------------------------

    async def sleep(self, seconds: float) -> None:
        """A durable timer: the run gives its slot back and wakes after `seconds`, even if
        every worker was restarted meanwhile."""
        finite(seconds, "seconds")
        await self._sleep_until(lambda: self.runtime.clock() + max(0.0, seconds))

    async def sleep_until(self, when: float | dt.datetime) -> None:
        """Like `sleep`, to an epoch time or an aware datetime."""
        when = due_at(0, None, when)
        await self._sleep_until(lambda: float(when))

    async def _sleep_until(self, wake_at_of: Callable[[], float]) -> None:
        position, record = await self._next("sleep")
        if record is None:
            wake_at = wake_at_of()
            await self._record(position, "sleep", "done", result=json.dumps({"until": wake_at}))
        else:
            wake_at = record.value()["until"]
        remaining = wake_at - self.runtime.clock()
        if remaining <= 0:
            return
        if remaining <= INLINE_SLEEP_S:
            await asyncio.sleep(remaining)
            return
        raise Park(wake_at, "sleep", WaitReason.SLEEP)

    # -- questions to a person ------------------------------------------------------

    async def ask(self, question: str, *, schema: Any = None) -> Any:
        """Ask a person, and return the answer. The run parks (no slot held) until an
        answer comes from any process: `app.answer(run_id, question_id, value)`,
        `runwright answer`, or `POST /runs/{id}/answers`; `app.questions()` lists what
        is waiting. `schema`, a JSON Schema or a Python type (bool, a pydantic model, a
        Literal...), is what the answer must fit: a value that does not is refused where
        it is given. With a type, the answer comes back as that type.

        Like a step, the answer is journaled: a replay returns it without asking again."""
        if not isinstance(question, str) or not question:
            raise ValueError("a question is a non-empty string")
        answer = await self.ask_for("question", "ask", {"text": question, "schema": schema_of(schema)})
        if schema is None or isinstance(schema, dict):
            return answer["value"]
        from pydantic import TypeAdapter

        return TypeAdapter(schema).validate_python(answer["value"])

    async def ask_for(self, kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """The journaled answer `{"value", "by", "at"}` to a question of `kind` asked at
        the next position under step `name` (`ask` builds on it; so do tool approvals)."""
        await self.stop_if_interrupted()
        try:
            position, record = await self._next(name)
        except DryReplayEnd as end:
            end.asks = kind  # a question asked here before is this one's: the run waits on it
            raise
        if record is not None:
            return dict(_replay(record))
        body_json = encode(body, f"question {name!r}", self.runtime.limits.max_payload_bytes)
        asked = await through_blinks(self.runtime.store.question_open, QuestionOpenParams(
            self.run.id, self.run.fence, position, kind, body_json))
        if asked is None:
            raise LeaseLost(self.run.id, self.run.fence)
        if not asked.answered:
            raise Park(self.runtime.clock() + ANSWER_RECHECK_S, "answer", WaitReason.ANSWER)
        answer = {"value": asked.answer, "by": asked.answered_by, "at": asked.answered_at}
        await self._record(position, name, "done", result=json.dumps(answer))
        return answer

    # -- patches: code that changes under runs in flight ------------------------------

    async def patched(self, patch_id: str) -> bool:
        """Whether this run takes the new path of a change deployed under runs in flight:
        `if await ctx.patched("new-lookup"): <new steps> else: <old steps>`. True for a run
        that reaches this point under code that has the patch (a marker is journaled
        here), False for one whose journal already went past this point without it (it
        ran the old steps): replay takes the same branch forever. Decided once per run
        and patch id: later calls return the same answer and journal nothing."""
        if patch_id in self._patches:
            return self._patches[patch_id]
        name = f"{PATCH_PREFIX}{check_patch_id(patch_id)}"
        if self._position < self._base:
            await self._read_whole_journal()
        record = self._journal.get(self._position)
        if (record is not None and record.name != name) or (record is None and await self._waits_here()):
            # The old code's step is here, or the question it asked here or the event wait
            # it registered here (the run waits on it, or on taking its answer or event):
            # the old path, which takes it.
            self._patches[patch_id] = False
            return False
        position, record = await self._next(name)
        if record is None:
            await self._record(position, name, "done", result="true")
        self._patches[patch_id] = True
        return True

    async def _waits_here(self) -> bool:
        """Whether the run asked a question or registered an event wait at the current
        position that its journal does not hold: only where the journal this attempt
        started from ends can there be one."""
        if self._position != self._end:
            return False
        store = self.runtime.store
        asked = await through_blinks(store.question_list, QuestionListParams(
            self.run.id, pending=False, limit=QUESTIONS_READ))
        if any(question.id == self._position for question in asked):
            return True
        waits = await through_blinks(store.event_wait_list, EventWaitListParams(self.run.id))
        return any(wait.position == self._position for wait in waits)

    async def deprecate_patch(self, patch_id: str) -> None:
        """Where a `patched(patch_id)` was, once no run on the old path is left (`runwright
        patches`): the old branch is deleted and this stays, so that runs that journaled
        the marker still replay. It journals nothing: it steps over the marker if there."""
        name = f"{PATCH_PREFIX}{check_patch_id(patch_id)}"
        if self._position < self._base:
            await self._read_whole_journal()
        record = self._journal.get(self._position)
        if record is not None and record.name == name:
            await self._next(name)

    # -- signals --------------------------------------------------------------------

    async def wait_signal(self, name: str, *, timeout_s: float | None = None) -> Any:
        """The payload of the next signal `name` sent to this run (`run.signal(name,
        payload)`, `runwright signal`, `POST /runs/{id}/signals`), in the order sent. A
        signal sent before the wait is kept until a wait takes it; while none is there the
        run parks (no slot held) and the send wakes it. Journaled as a step: each signal
        is taken by one wait, once, and a replay returns the same payload.

        With `timeout_s`, TimeoutError once that long has passed since the wait began
        (counted from the first attempt that reached it, across parks and takeovers); the
        timeout is journaled too, so a replay raises it again."""
        return (await self._wait_signal(name, timeout_s))["payload"]

    async def _wait_signal(self, name: str, timeout_s: float | None) -> dict[str, Any]:
        """wait_signal's outcome: the signal's payload, its seq and when it was sent."""
        check_signal_name(name)
        until = await self._deadline(f"signal-deadline:{name}", timeout_s)
        step = f"signal:{name}"
        position, record = await self._next(step)
        if record is not None:
            return _signal_outcome(name, record.value())
        await self.stop_if_interrupted()
        taken = await self._take_signal(position, name, until, step)
        if not taken.owned:
            raise LeaseLost(self.run.id, self.run.fence)
        if taken.signal is not None:
            crash_point("signal.after_take", name)
            if taken.journaled is not None:  # the take wrote the entry too, in one write
                return _signal_outcome(name, json.loads(taken.journaled))
            outcome = taken_outcome(taken.signal)
        elif until is not None and self.runtime.clock() >= until:
            outcome = {"timeout": True}
        else:
            recheck = self.runtime.clock() + SIGNAL_RECHECK_S
            raise Park(recheck if until is None else min(until, recheck), f"signal {name!r}",
                       WaitReason.SIGNAL)
        await self._record(position, step, "done", result=json.dumps(outcome))
        return _signal_outcome(name, outcome)

    async def take_signal(self, name: str) -> dict[str, Any] | None:
        """Without waiting: the next pending signal `name` (`{"payload", "seq",
        "sent_at"}`), or None when none is pending. A take that finds one is journaled as
        `wait_signal`'s (fenced, once: a crash before its journal entry takes the same
        signal again at the same position); one that finds none journals nothing and
        takes no position, so a replay knows it found none by the position holding another
        step. A replay returns what the first execution took, whatever came since."""
        check_signal_name(name)
        step = f"signal:{name}"
        if self._position < self._base:
            await self._read_whole_journal()
        if self.replaying:
            record = self._journal.get(self._position)
            if record is None or record.name != step:
                return None  # the first execution found none here
            await self._next(step)
            return dict(record.value())
        if self._dry:  # the journal ended: the operation after this one is the new work to name
            return None
        position, _ = await self._next(step)
        # Journaled apart from the take (no `step`), even where a store could in one
        # write: a steer's take that fails before its entry leaves the message to its
        # follower run, and a dry replay stops at the take (see agents' steering).
        taken = await through_blinks(self.runtime.store.signal_take, SignalTakeParams(
            self.run.id, self.run.fence, position, name))
        if not taken.owned:
            raise LeaseLost(self.run.id, self.run.fence)
        if taken.signal is None:
            self._position -= 1  # not taken: the position is the next operation's
            return None
        crash_point("signal.after_take", name)
        outcome = taken_outcome(taken.signal)
        await self._record(position, step, "done", result=json.dumps(outcome))
        return outcome

    async def wait_event(self, name: str, *, match: Mapping[str, Any] | None = None,
                         timeout_s: float | None = None) -> Any:
        """The data of the next event `name` published (`app.publish_event`, `runwright
        publish`, `POST /events`) in this run's tenant whose data fits `match` (field or
        dotted path -> equal value), after this wait began: an event published before it
        is not delivered to it. The run parks meanwhile (no slot held); the publish wakes
        it. Journaled as a step: delivered once, and a replay returns the same data. With
        `timeout_s`, TimeoutError as `wait_signal`'s (journaled too). See engine._events."""
        return await _wait_event(self, name, match, timeout_s)

    async def set_state(self, key: str, value: Any) -> None:
        """Publish `value` (JSON) under `key` as this run's durable state: what its task's
        queries (`@task.query`), `app.state(run_id)`, `GET /runs/{id}/state` and the run
        page read, from any process, while the run runs, parks, or after its worker died.
        Journaled like a step: published once, and a replay publishes nothing again."""
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"a state key is an identifier, got {key!r}")
        step = f"{STATE_PREFIX}{key}"
        position, record = await self._next(step)
        if record is None:
            body = await self.runtime.limits.stored({"value": value}, f"state {key!r}")
            await self._record(position, step, "done", result=body)

    async def _deadline(self, step: str, timeout_s: float | None) -> float | None:
        """When a wait with `timeout_s` gives up: journaled as `step` where the wait first
        began, so that it counts from there across parks and takeovers (None: no timeout)."""
        if timeout_s is None:
            return None
        finite(timeout_s, "timeout_s")
        position, record = await self._next(step)
        if record is not None:
            return float(record.value()["until"])
        until = self.runtime.clock() + max(0.0, timeout_s)
        await self._record(position, step, "done", json.dumps({"until": until}))
        return until

    async def _take_signal(self, position: int, name: str, until: float | None,
                           step: str | None = None) -> SignalTaken:
        """Take the wait's signal; when none is pending, linger in the slot a moment
        (SIGNAL_LINGER_S, within the timeout) for one to come, woken by the run's log
        growing (a send logs `signalled`): a conversation's next message then costs a
        follow's latency, not a park, a claim and a replay. With `step`, a store that can
        journals the take as that step in the same write (`SignalTaken.journaled`), and
        lets the lingering wait be delivered into by the send (`SignalTakeParams.linger`):
        woken, it then only reads what it was given. Its last take, at the linger's end,
        withdraws it, so that nothing is delivered into a wait that has stopped lingering
        (whose timeout or park is on its way); a look after that take finds what was
        delivered while the take waited for the run (its reads keep the snapshot from
        before that wait), so the timeout's entry never meets a delivery's."""
        store = self.runtime.store
        params = SignalTakeParams(self.run.id, self.run.fence, position, name, step=step)
        with store.hub.watch(events_topic(self.run.id)) as grown:
            # From the first such wait on, this worker hears every run's log grow, as a
            # follower's process does (a worker alone hears only due work and cancels).
            await store.listen()
            linger_until = time.monotonic() + SIGNAL_LINGER_S
            if until is not None:
                linger_until = min(linger_until, time.monotonic() + until - self.runtime.clock())
            lingering = lingered = False
            while True:
                grown.clear()
                last = linger_until - time.monotonic() <= 0
                if lingering and not last:
                    looked = await through_blinks(store.signal_take, replace(params, peek=True))
                    if looked.signal is not None or not looked.owned:
                        return looked
                    if looked.lingering:  # nothing delivered, nothing pending: linger on
                        await wait_set(grown, linger_until - time.monotonic())
                        continue
                taken = await through_blinks(store.signal_take, replace(params, linger=not last))
                if taken.signal is not None or not taken.owned:
                    return taken
                if last:
                    if lingered:
                        return await through_blinks(store.signal_take, replace(params, peek=True))
                    return taken
                lingering = taken.lingering
                lingered = lingered or lingering
                await wait_set(grown, linger_until - time.monotonic())

    async def handle_update(self, name: str, handler: Callable[..., Any], *,
                            timeout_s: float | None = None) -> Any:
        """Handle the next update `name` sent to this run (`app.update(run_id, name,
        payload)`, `POST /runs/{id}/updates`): wait for it as for a signal (parked, no
        slot held), run `handler(payload)` as a journaled step (once, whatever crashes
        follow), and send its result back to the sender (an `updated` event of the run's
        log, which the sender follows). Returns the result. A handler that raises a
        FinalError fails the update and the run, as a step's would; validate in the
        task's update validator instead (`@task.validate_update`), which refuses a bad
        update at the sender's side before anything is written."""
        outcome = await self._wait_signal(f"{UPDATE_PREFIX}{name}", timeout_s)
        result = await self.step(f"{UPDATE_PREFIX}{name}", handler, outcome["payload"])
        await self._emit("updated", {"update": outcome["seq"], "name": name, "result": result})
        return result

    async def signals(self, name: str) -> AsyncIterator[Any]:
        """The signals `name` sent to this run, as a durable stream in the order sent: each
        iteration is a `wait_signal(name)` (it parks while none is pending). It never ends
        by itself: break out of it when the conversation is over."""
        while True:
            yield await self.wait_signal(name)

    # -- child runs -----------------------------------------------------------------

    async def submit(self, task: TaskSpec | str, /, *args: Any, key: str | None = None,
                     priority: int | None = None, queue: str | None = None,
                     on_conflict: str = "reject", **kwargs: Any) -> ChildRun:
        """Start a child run through_blinks: the same child on every replay, never two. `await`
        it (or `ctx.gather(...)` several) to park this run until it ends.

        A key names the child as `app.submit`'s does: a `key` that names a run submitted
        otherwise, not this run's own child, raises KeyConflict (`on_conflict="return"`
        gets that run). This run's own child, made by an earlier attempt that died before
        journaling it, is the replay's child whatever its arguments."""
        spec = self.runtime.registry.task_spec(task)
        check_on_conflict(on_conflict)
        position, record = await self._next(f"submit:{spec.name}")
        if record is not None:
            return ChildRun(self, record.value())
        # The child's key is fixed by this position: if we crash before journaling, the
        # replay submits the same key again and gets the same child back. It is of the
        # parent's tenant, so its key is unique among that tenant's keys. Its trace is the
        # parent's, under the span of this submission (derived: the same on a replay).
        name = f"submit:{spec.name}"
        traceparent = self.trace.traceparent(self.trace.step_span_id(self.run.fence, position))
        submission = Submission(key=key or f"{self.run.key}/{position}", priority=priority,
                                queue=queue, tenant=self.run.tenant, parent_id=self.run.id,
                                traceparent=traceparent)
        params = insert_params(spec, spec.bind(args, kwargs), submission,
                               now_s=self.runtime.clock(), limits=self.runtime.limits,
                               version=self.runtime.registry.version)
        # Fenced as this attempt's other writes: a stale owner (woken after a takeover, or
        # after its run was cancelled and removed) makes no child; it gets LeaseLost.
        params.parent_fence = self.run.fence
        with self._span(name, position) as current:
            (child,) = await through_blinks(self.runtime.store.run_insert_many, [params])
            if child.parent_id != self.run.id:  # a run of another's, under this key
                check_key_reuse(child, params, on_conflict)
            crash_point("child.after_insert", spec.name)
            if current is not None:
                current.set_attribute("runwright.child.id", child.id)
            await self._record(position, name, "done", result=json.dumps(child.id))
        return ChildRun(self, child.id)

    async def gather(self, *children: ChildRun, return_exceptions: bool = False) -> list[Any]:
        """Results of several children in order, reading them in one query; parks this run
        until all have ended. With return_exceptions, a failed child's ChildFailed is
        returned in its place instead of raised."""
        found = await through_blinks(self.runtime.store.run_get_many, [c.id for c in children])
        runs = {run.id: run for run in found}
        if not all(runs[c.id].done for c in children):
            raise Park(self.runtime.clock() + CHILD_RECHECK_S, "children", WaitReason.CHILDREN)
        out = []
        for child in children:
            try:
                out.append(_child_outcome(runs[child.id]))
            except ChildFailed as exc:
                if not return_exceptions:
                    raise
                out.append(exc)
        return out

    # -- events ---------------------------------------------------------------------

    async def emit(self, kind: str, data: Any = None) -> int:
        """Append an event to this run's log (fenced); returns its seq.

        An emit between durable operations is part of the run's history, like a step: it
        is appended once, however often the code runs again (a replay after a takeover,
        a retry, a resume), and followers see it once. Made again, it appends nothing and
        returns the seq it got the first time (0 when the log no longer holds it: trimmed
        by retention, or appended by a runwright that did not mark emits). An emit inside
        a step's function belongs to that execution of the step: it is appended each time
        the step runs (as an agent's streamed tokens are, with a reset between)."""
        if kind in RESERVED_KINDS:
            raise ValueError(f"event kind {kind!r} is reserved for runwright's own events")
        return await self._emit(kind, data)

    async def _emit(self, kind: str, data: Any) -> int:
        if self._dry:
            return 0
        payload = await self.runtime.limits.stored(data if data is not None else {},
                                                   f"data of event {kind!r}")
        params = EventAppendParams(self.run.id, self.run.fence, [(kind, payload)])
        if not _IN_STEP.get():
            params.mark, params.replayed = self._emit_mark(), self.replaying
        seqs = await through_blinks(self.runtime.store.event_append, params)
        if seqs is None:
            raise LeaseLost(self.run.id, self.run.fence)
        return seqs[0] if seqs else 0

    def _emit_mark(self) -> str:
        """The emit's place in the run's code, the same on every replay: "<position>.<n>",
        the n-th emit (from 0) before the durable operation at journal position <position>."""
        if self._position != self._emit_position:
            self._emit_position, self._emits_here = self._position, 0
        self._emits_here += 1
        return f"{self._position}.{self._emits_here - 1}"


def current_context() -> Context | None:
    """The Context of the run executing in this asyncio task, or None outside a run."""
    return CURRENT.get()


class DryReplayEnd(Exception):
    """A dry replay reached the end of the run's journal: the operation `name` at
    `position` would be new work."""

    def __init__(self, position: int, name: str) -> None:
        super().__init__(f"the journal ends before #{position} ({name!r})")
        self.position, self.name = position, name
        self.asks: str | None = None  # the kind of question the operation asks, if it asks one


class ChildRun:
    """A child run started by `ctx.submit`. Awaiting it returns its value (or raises
    ChildFailed), parking the parent, without holding a slot, until the child ends."""

    __slots__ = ("_ctx", "id")

    def __init__(self, ctx: Context, run_id: int) -> None:
        self._ctx = ctx
        self.id = run_id

    def __repr__(self) -> str:
        return f"<ChildRun {self.id}>"

    async def result(self) -> Any:
        (value,) = await self._ctx.gather(self)
        return value

    def __await__(self) -> Generator[Any, None, Any]:
        return self.result().__await__()


def _child_outcome(run: Run) -> Any:
    try:
        return outcome_of(run)
    except Exception as exc:
        raise ChildFailed(run.id, run.state.value, run.error_info()) from exc


def _signal_outcome(name: str, outcome: dict[str, Any]) -> dict[str, Any]:
    if outcome.get("timeout"):
        raise TimeoutError(f"no signal {name!r} came within the wait's timeout")
    return outcome


def _replay(record: StepRecord) -> Any:
    if record.status == "done":
        return record.value()
    error = json.loads(record.error or "{}")
    kind = OutcomeUnknown if error.get("type") == "OutcomeUnknown" else StepFailed
    raise kind(record.name, record.position, error)


async def _step_body(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                     policy: RetryPolicy) -> Any:
    """The step's function, run (with its retries) as a step body: see `_IN_STEP`."""
    entered = _IN_STEP.set(True)
    try:
        return await _call_with_retries(fn, args, kwargs, policy)
    finally:
        _IN_STEP.reset(entered)


async def _call_with_retries(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                             policy: RetryPolicy) -> Any:
    attempt = 1
    while True:
        try:
            # Plain functions run in a thread: a blocking step must not stall the worker's
            # lease renewals and its other runs.
            if inspect.iscoroutinefunction(fn):
                return await fn(*args, **kwargs)
            value = await in_thread(fn, *args, **kwargs)
            return await value if inspect.isawaitable(value) else value
        except Exception as exc:
            if policy.is_final(exc) or attempt >= policy.max_attempts:
                raise
            await asyncio.sleep(policy.backoff.delay_s(attempt))
            attempt += 1

