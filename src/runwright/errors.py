"""The exception tree of runwright.

    RunwrightError
    ├── ConfigError                 a setting that cannot work (bad URL, shape that cannot converge)
    │   ├── TransactionsUnsupported a transactional write (step, submit, signal, publish) on Redis
    │   └── PayloadUnreadable       a stored payload under a key id this process lacks, or its blob missing
    ├── DeploymentMoved             the store is sealed by `runwright move`, or moved (names the target)
    ├── StoreError                  the store failed
    │   ├── StoreUnreachable        the store cannot be reached (at start: a clear exit)
    │   └── SchemaError             the schema is missing or newer than this code knows
    ├── InvalidInput                a bad input, refused before anything is written (a ValueError)
    │   ├── UnknownTask             a task name that is not registered
    │   ├── BadArguments            arguments that do not fit a task's or a tool's signature or type hints
    │   ├── SerializationError      a value that does not serialize to JSON
    │   ├── PayloadTooLarge         an encoded payload over the size limit
    │   ├── InvalidTime             a malformed run_at, delay or duration
    │   └── ScheduleNotFound        a schedule name that is not stored
    ├── RunNotFound                 an unknown run id
    │   └── RunExpired              a run that existed, reclaimed by retention
    ├── QuestionNotFound            no question of that run at that id (ctx.ask, approvals)
    ├── ThreadNotFound              a thread that does not exist
    ├── ThreadBusy                  a submission with on_busy="reject" to a thread with an open run
    ├── KeyConflict                 a key that names a run submitted otherwise (its task, arguments...)
    ├── SingletonTaken              a singleton task's key has a queued or running run (rw.Singleton)
    ├── SignalsFull                 a signal to a run that has as many pending as it may keep
    ├── ThreadDeleted               a thread that was deleted (reading it, or submitting to it)
    ├── InvalidTransition           a state change the transition table does not allow
    │   ├── RunEnded                e.g. cancel of a run that already ended
    │   ├── RunNotRetryable         a manual retry of a run that is not dead or failed
    │   ├── RunNotPaused            a resume of a run that is not paused
    │   └── AlreadyAnswered         a second, different answer to a question
    ├── LeaseLost                   a fenced write refused: another owner superseded this one
    ├── TaskTimeout                 raised inside a run that passed its timeout (a TimeoutError)
    ├── ModelUnavailable            agents.models: a provider kept failing through every retry of a call
    ├── WebhookRetryable            jobs.webhook: a failure a later attempt may not meet (5xx, 429)
    ├── RunWaitTimeout              raised by result(timeout_s=): the run did not end in time, and why
    ├── UpdateTimeout               raised by update(timeout_s=): no reply in time (withdrawn, or applying)
    ├── RunFailed                   raised by result(): the run ended failed or dead
    │   ├── RunCancelled            raised by result(): the run was cancelled
    │   └── ChildFailed             raised in a parent awaiting a child run that did not succeed
    └── FinalError                  raised by a task to end its run `failed`, without retry
        ├── StepFailed              a step ended with a final error (journaled: replays raise it)
        │   └── OutcomeUnknown      an at-most-once step started, and its worker died mid-call
        ├── NonDeterminismError     replay met another step than the journal holds
        ├── BudgetExceeded          a run's budget ran out (cost, deadline, turns)
        ├── ModelError              agents.models: the provider refused the request (a 4xx but 429)
        ├── ScriptExhausted         testing: an agent asked a ScriptedModel for more replies than scripted
        ├── WebhookRefused          jobs.webhook: a call that must not be made, or a final answer
        └── AgentRunError           integrations.openai_agents: the SDK ended a run with its own error
            └── GuardrailTripped    integrations.openai_agents: an input or output guardrail tripped

The errors of `agents.models`, `jobs.webhook`, `testing` and `integrations.openai_agents` live
beside the code that raises them; they are drawn here so that the tree is whole. Not drawn,
on purpose: the control-flow signals of `parking` (BaseException, never errors) and
`crashpoints.CrashPointReached`, which stands for an unexpected failure and so must not look
like one of runwright's own.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AlreadyAnswered",
    "BadArguments",
    "BudgetExceeded",
    "ChildFailed",
    "ConfigError",
    "DeploymentMoved",
    "FinalError",
    "InvalidInput",
    "InvalidTime",
    "InvalidTransition",
    "KeyConflict",
    "LeaseLost",
    "NonDeterminismError",
    "OutcomeUnknown",
    "PayloadTooLarge",
    "PayloadUnreadable",
    "QuestionNotFound",
    "RunCancelled",
    "RunEnded",
    "RunExpired",
    "RunFailed",
    "RunNotFound",
    "RunNotPaused",
    "RunNotRetryable",
    "RunWaitTimeout",
    "RunwrightError",
    "ScheduleNotFound",
    "SchemaError",
    "SerializationError",
    "SignalsFull",
    "SingletonTaken",
    "StepFailed",
    "StoreError",
    "StoreUnreachable",
    "TaskTimeout",
    "TransactionsUnsupported",
    "ThreadBusy",
    "ThreadDeleted",
    "ThreadNotFound",
    "UnknownTask",
    "UpdateTimeout",
]


class RunwrightError(Exception):
    """Base of every error runwright raises on purpose."""


class ConfigError(RunwrightError):
    """A setting that cannot work; the message names the setting to fix."""


class TransactionsUnsupported(ConfigError):
    """A transactional step, submission, signal or publish asked of a store that keeps no
    SQL transaction (Redis): the message says what to use instead. Final: no retry can help."""


class PayloadUnreadable(ConfigError):
    """A stored payload (arguments, a result, a step's result, an event's data) this process
    cannot decode: encrypted under a key id it was not given (`key_id` names it), or not
    opened by its key of that id. Add the key to the App's `Codecs` or RUNWRIGHT_PAYLOAD_KEYS.
    Or offloaded to a blob store (`Codecs(blobs=...)`) and its blob is not there (`blob`
    names it): deleted, or the process was given another store."""

    def __init__(self, message: str, *, key_id: str | None = None, blob: str | None = None) -> None:
        super().__init__(message)
        self.key_id = key_id
        self.blob = blob


class DeploymentMoved(RunwrightError):
    """`runwright move` sealed this store (`state` "moving": retry in `retry_after_s`
    seconds, on `target` once it is done), or the deployment moved to `target` ("moved":
    this store is its tombstone and takes no write), or a move into this store is under
    way ("receiving": `target` names the store it comes from). Not a StoreError: waiting
    the store out cannot help, the URL must change."""

    def __init__(self, message: str, *, state: str, target: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.state = state
        self.target = target
        self.retry_after_s = retry_after_s


class StoreError(RunwrightError):
    """The store failed to do what was asked."""


class StoreUnreachable(StoreError):
    """The store cannot be reached."""


class SchemaError(StoreError):
    """The schema is missing, or newer than this code knows."""


class InvalidInput(RunwrightError, ValueError):
    """A bad input, refused before anything was written. `fields`: the inputs it names,
    where that is known, each as (where, what is wrong): `where` as a submission names it
    ("args.n", "args.order.qty"); HTTP lists them in a 422's `errors`."""

    def __init__(self, *args: object, fields: list[tuple[str, str]] | None = None) -> None:
        super().__init__(*args)
        self.fields = fields or []


class SignalsFull(RunwrightError):
    """A signal to a run that already has as many pending (sent, not yet taken) as it may
    keep: nothing was kept; send again once the run has read some."""


class UnknownTask(InvalidInput, LookupError):
    """A task name that no `@app.task` registered."""


class BadArguments(InvalidInput, TypeError):
    """Arguments that do not fit a task's (or a tool's) signature or type hints; the message
    names each argument, where within it, and what was expected."""


class SerializationError(InvalidInput, TypeError):
    """A value that does not serialize to JSON."""


class PayloadTooLarge(InvalidInput):
    """An encoded payload larger than the configured limit."""


class InvalidTime(InvalidInput):
    """A malformed time, delay or duration."""


class ScheduleNotFound(InvalidInput):
    """A schedule name that is not stored (paused, resumed or deleted)."""


class RunNotFound(RunwrightError, LookupError):
    """No run has this id (or key)."""


class RunExpired(RunNotFound):
    """The run existed, ended, and was reclaimed by retention: its record, journal and log
    are gone (an id that never named a run is RunNotFound)."""


class InvalidTransition(RunwrightError):
    """A state change that the transition table does not allow."""


class RunEnded(InvalidTransition):
    """The run has already ended, so it cannot be changed this way."""


class RunNotRetryable(InvalidTransition):
    """A manual retry of a run that is not dead or failed: a live run (queued or running:
    a retry would supersede its claim and run its step twice) or one that ended in a way
    a retry does not undo (succeeded, cancelled, interrupted). Nothing was changed."""

    def __init__(self, run_id: int, state: str, ended: bool) -> None:
        where = f"already ended {state}" if ended else f"is {state}"
        super().__init__(f"run {run_id} {where}: only a dead or failed run can be retried")
        self.run_id = run_id
        self.state = state


class RunNotPaused(InvalidTransition):
    """A resume of a run that is not paused (nor asked to pause while it runs): queued and
    not paused, or ended. Nothing was changed."""

    def __init__(self, run_id: int, state: str, ended: bool) -> None:
        where = f"already ended {state}" if ended else f"is {state} and not paused"
        super().__init__(f"run {run_id} {where}: only a paused run can be resumed")
        self.run_id = run_id
        self.state = state


class AlreadyAnswered(InvalidTransition):
    """The question was answered already, with another value (the same answer again is
    accepted: answering is idempotent)."""


class QuestionNotFound(RunwrightError, LookupError):
    """The run asked no question with this id."""


class LeaseLost(RunwrightError):
    """A fenced write was refused: the run was taken over by a newer claim."""

    def __init__(self, run_id: int, fence: int) -> None:
        super().__init__(f"run {run_id}: lease lost (fence {fence} superseded)")
        self.run_id = run_id
        self.fence = fence


class RunFailed(RunwrightError):
    """The run ended without success; `state` and `error` say how."""

    def __init__(self, run_id: int, state: str, error: dict[str, Any] | None) -> None:
        error = error or {}
        reason = f"{error.get('type', 'Error')}: {error.get('message', '')}".rstrip(": ")
        super().__init__(f"run {run_id} ended {state}: {reason}")
        self.run_id = run_id
        self.state = state
        self.error = error


class RunWaitTimeout(RunwrightError, TimeoutError):
    """`result(timeout_s=)` waited that long and the run has not ended (it goes on):
    `why` says what it waits for (a worker that serves its task, a timer, a person...)."""

    def __init__(self, run_id: int, timeout_s: float, why: str) -> None:
        super().__init__(f"run {run_id} did not end within {timeout_s:g} s: {why}")
        self.run_id = run_id
        self.timeout_s = timeout_s
        self.why = why


class UpdateTimeout(RunwrightError, TimeoutError):
    """`update(timeout_s=)` had no reply in time. Never half applied: `applying` False
    when no wait had taken it, and it was withdrawn (it will never be applied); True when
    the run had taken it already: its handler, a journaled step, completes, and its
    result will be the run's `updated` event for update `seq`."""

    def __init__(self, run_id: int, name: str, seq: int, timeout_s: float, applying: bool) -> None:
        fate = ("the run is applying it; its result will be its `updated` event" if applying
                else "withdrawn: it will not be applied")
        super().__init__(f"run {run_id} did not answer update {name!r} (#{seq}) within {timeout_s:g} s: "
                         f"{fate}")
        self.run_id, self.name, self.seq, self.applying = run_id, name, seq, applying


class RunCancelled(RunFailed):
    """The run was cancelled."""


class ChildFailed(RunFailed):
    """A child run awaited by its parent ended without success."""


class FinalError(RunwrightError):
    """Raise from a task to end the run `failed` at once: no retry can help."""


class StepFailed(FinalError):
    """A step ended with a final error. It is journaled, so a replay raises it again
    instead of running the step; `error` holds the original type and message."""

    def __init__(self, name: str, position: int, error: dict[str, Any]) -> None:
        super().__init__(f"step {name!r} (#{position}) failed: "
                         f"{error.get('type', 'Error')}: {error.get('message', '')}")
        self.name = name
        self.position = position
        self.error = error


class NonDeterminismError(FinalError):
    """Replay asked for a different step than the journal holds at that position: the
    task's code or its inputs changed the sequence of steps. Ends the run `failed`."""


class TaskTimeout(RunwrightError, TimeoutError):
    """The attempt ran past its task's `timeout_s`."""


class OutcomeUnknown(StepFailed):
    """An at-most-once step was started (its mark is journaled) but no outcome was
    recorded: its worker died mid-call. It is never run again; this is what replays get."""


class BudgetExceeded(FinalError):
    """The run's budget ran out: max_cost_usd, deadline_s or max_turns."""


class ThreadBusy(RunwrightError):
    """The thread has an open run, and the submission said on_busy="reject"."""

    def __init__(self, thread: str, run_id: int, state: str) -> None:
        super().__init__(f"thread {thread!r} is busy with run {run_id} ({state}); submit with "
                         f"on_busy='enqueue', 'interrupt' or 'rollback' to queue behind it or stop it")
        self.thread = thread
        self.run_id = run_id


class SingletonTaken(RunwrightError):
    """A run of a singleton task (`Singleton`, tasks._flow) was submitted while its key
    has a queued or running run, and the task's `on_conflict` is "refuse" (or "replace",
    and that run is already running: a running run is never replaced). `key` is the key
    the submission made, `run_id` the run that holds it; nothing of the submission was
    written. Submit again once that run ends, or cancel it first."""

    def __init__(self, task: str, key: str, run_id: int, state: str) -> None:
        super().__init__(f"task {task!r}: singleton key {key!r} is held by run {run_id} ({state}); "
                         f"nothing was submitted")
        self.task = task
        self.key = key
        self.run_id = run_id
        self.state = state


class KeyConflict(RunwrightError):
    """An idempotency key was given again for another submission: the run it names was
    submitted with another task, other arguments or other options (`differs` names
    them: "task", "arguments", "queue", "priority", "thread", "budget"). The key is not
    given to the new submission, so nothing of it was written; `on_conflict="return"`
    gets the existing run as it is. `run_id` is that run. A batch (`submit_many`) in
    which items conflict raises this for its first conflicting item: `items` lists the
    index of every one, and `handles` holds the batch's runs, in order (its other items
    were written, as one write). Raised in a task (by `ctx.submit`) and not caught, it
    ends the run `failed` at once, as a FinalError does: no retry could change it."""

    def __init__(self, key: str, run_id: int, differs: list[str], detail: str, *,
                 items: list[int] | None = None, handles: list[Any] | None = None) -> None:
        items = items or []
        where = f"item {items[0]}: " if items else ""
        more = f" (items {', '.join(map(str, items))} of the batch conflict)" if len(items) > 1 else ""
        super().__init__(f"{where}key {key!r} names run {run_id}, which was submitted with {detail}; give "
                         f"another key, or on_conflict='return' to get run {run_id} as it is{more}")
        self.key = key
        self.run_id = run_id
        self.differs = differs
        self.detail = detail
        self.items = items
        self.handles = handles or []


class ThreadDeleted(RunwrightError, LookupError):
    """The thread was deleted: it can be neither read nor submitted to."""


class ThreadNotFound(RunwrightError, LookupError):
    """No thread has this id."""
