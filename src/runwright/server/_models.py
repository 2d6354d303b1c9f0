"""Request and response bodies: validated by Pydantic, published in the OpenAPI document."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from ..client._threads import ThreadCursor, ThreadInfo
from ..client._why import Waiting
from ..core import _inputs as inputs
from ..core._journal import Event, ThreadEvent
from ..core._payloads import sealed_view
from ..core._schedules import Schedule
from ..errors import InvalidInput
from ..jobs._bodies import BODIES, ChainArgs, LlmArgs, WebhookArgs
from ..runs import Run, WaitReason
from ..tasks._budget import Budget
from ..tasks._submission import MAX_PRIORITY, PRIORITY_HELP
from ._decode import sealed_for

__all__ = ["SUBMIT_TAGS", "EventOut", "EventPage", "ForkIn", "RunOut", "RunPage", "ScheduleIn", "ScheduleOut",
           "SubmitIn", "SubmitOptions", "ThreadEventOut", "ThreadEventPage", "ThreadInfoOut", "ThreadOut",
           "ThreadPage", "WaitingOut", "cursor_of", "thread_cursor"]


class BudgetIn(BaseModel):
    """Bounds the run may not exceed; exceeding one ends it `failed` with the reason."""

    model_config = ConfigDict(extra="forbid")

    max_cost_usd: float | None = Field(None, gt=0, description="Model spending (agents).")
    deadline_s: float | None = Field(None, gt=0, description="From submission to the end.")
    max_turns: int | None = Field(None, gt=0, description="Model calls of an agent run.")

    def budget(self) -> Budget:
        return Budget(self.max_cost_usd, self.deadline_s, self.max_turns)


class SubmitOptions(BaseModel):
    """The submission options, beside the job type and its arguments: one field for each
    name of `submission.OPTIONS` but `tenant` (the caller's token decides it), `traceparent`
    (a header) and `connection` (a program's own database connection)."""

    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(None, max_length=512,
                            description="Idempotency key: the same key is the same run (409 when "
                                        "it names a run submitted otherwise).")
    priority: int | None = Field(None, ge=0, le=MAX_PRIORITY, description=PRIORITY_HELP)
    delay_s: float | None = Field(None, ge=0, description="Start no sooner than this many seconds "
                                                          "from now (or give run_at).")
    run_at: float | Annotated[str, Field(json_schema_extra={"format": "date-time"})] | None = Field(
        None, description="Start no sooner than this: ISO 8601 with a time zone, or epoch seconds.")
    queue: str | None = Field(None, max_length=200)
    budget: BudgetIn | None = None
    thread: str | None = Field(None, max_length=256, description="The conversation this run joins.")
    on_busy: str = Field("reject", pattern="^(reject|enqueue|interrupt|rollback|steer)$",
                         description="When the thread has an open run.")
    on_conflict: Literal["reject", "return"] = Field("reject",
                             description="When the key names a run submitted otherwise (another task, "
                                         "arguments, queue, priority, thread or budget): reject (409) "
                                         "or return that run (200).")

    def submission(self) -> dict[str, Any]:
        """The options as `submit` takes them (keywords of `submission.OPTIONS`)."""
        return {"key": self.key, "priority": self.priority, "delay_s": self.delay_s,
                "run_at": self.run_at, "queue": self.queue, "thread": self.thread,
                "on_busy": self.on_busy, "on_conflict": self.on_conflict,
                "budget": self.budget.budget() if self.budget else None}


class TaskSubmitIn(SubmitOptions):
    task: str = Field(description="A registered task, or a built-in job type (webhook, llm, chain).")
    args: dict[str, Any] = Field(default_factory=dict, description="The task's keyword arguments.")

    def arguments(self) -> dict[str, Any]:
        return self.args


class WebhookSubmitIn(SubmitOptions):
    task: Literal["webhook"]
    args: WebhookArgs

    def arguments(self) -> dict[str, Any]:
        return self.args.model_dump(exclude_unset=True)


class LlmSubmitIn(SubmitOptions):
    task: Literal["llm"]
    args: LlmArgs

    def arguments(self) -> dict[str, Any]:
        return self.args.model_dump(exclude_unset=True)


class ChainSubmitIn(SubmitOptions):
    task: Literal["chain"]
    args: ChainArgs

    def arguments(self) -> dict[str, Any]:
        return self.args.model_dump(exclude_unset=True)


# The tag of each model a submission may be checked by (not shown in error locations).
SUBMIT_TAGS = frozenset({*BODIES, "task"})


def _job_type(body: Any) -> str:
    """Which model a submission is checked by: its built-in job type's, else the task's."""
    task = body.get("task") if isinstance(body, dict) else getattr(body, "task", None)
    return task if task in BODIES else "task"


# A built-in job's arguments are checked field by field (and published); a task's are
# checked against its signature by the App.
SubmitIn = Annotated[
    Annotated[WebhookSubmitIn, Tag("webhook")] | Annotated[LlmSubmitIn, Tag("llm")]
    | Annotated[ChainSubmitIn, Tag("chain")] | Annotated[TaskSubmitIn, Tag("task")],
    Discriminator(_job_type)]


class ScheduleIn(BaseModel):
    """A cron schedule: each fire submits a run of `task` with `args`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern="^[^:]+$")
    cron: str = Field(description="croniter syntax; an optional seconds field comes last.")
    task: str
    args: dict[str, Any] = Field(default_factory=dict)
    tz: str = Field("UTC", description="An IANA time zone, e.g. Europe/Paris.")
    misfire: Literal["skip", "catch_up"] = "skip"
    catch_up_limit: int = Field(10, ge=1, le=1000)
    queue: str | None = Field(None, max_length=200)
    priority: int | None = Field(None, ge=0, le=MAX_PRIORITY, description=PRIORITY_HELP)


class ScheduleOut(BaseModel):
    name: str
    cron: str
    tz: str
    task: str
    queue: str
    priority: int
    paused: bool
    misfire: str
    catch_up_limit: int
    next_fire_at: float

    @classmethod
    def of(cls, schedule: Schedule) -> ScheduleOut:
        return cls(name=schedule.name, cron=schedule.cron, tz=schedule.tz, task=schedule.task,
                   queue=schedule.queue, priority=schedule.priority, paused=schedule.paused,
                   misfire=schedule.misfire, catch_up_limit=schedule.catch_up_limit,
                   next_fire_at=schedule.next_fire_at)


class WaitingOut(BaseModel):
    """Why a queued run is not running (README: Why a run waits)."""

    reason: WaitReason = Field(description="sleep, answer, children, rate_limit, retry, scheduled "
                                           "(until a time or an event); worker, version, thread, "
                                           "slot (due: what it waits for).")
    until: float | None = Field(description="When it comes due (epoch seconds), where a time decides.")
    detail: str = Field(description="One line saying it.")


class RunOut(BaseModel):
    id: int
    key: str
    task: str
    queue: str
    priority: int
    state: str
    args: dict[str, Any]
    attempt: int = Field(description="Which of its max_attempts tries the run is on, from 1; 0 before "
                                     "its first claim (README: Attempts).")
    max_attempts: int
    run_at: float
    created_at: float
    started_at: float | None
    finished_at: float | None
    result: Any = None
    error: dict[str, Any] | None = None
    thread: str | None = None
    parent_id: int | None = None
    tenant: str | None = Field(None, description="The tenant that submitted it; null: none (the "
                                                 "CLI, a program's App, a schedule), seen only "
                                                 "with an operator token.")
    budget: dict[str, float] | None = Field(None, description="The bounds it was submitted with.")
    deadline_at: float | None = None
    last_seq: int
    traceparent: str | None = Field(None, description="The W3C traceparent it was submitted with "
                                                      "(its spans continue that trace); null: "
                                                      "it has a trace of its own.")
    version: str | None = Field(None, description="The version of the app that submitted it (its "
                                                  "major decides which workers may run it); null: "
                                                  "submitted before runs recorded one.")
    forked_from: int | None = Field(None, description="The run it was forked from (POST "
                                                      "/runs/{id}/fork); null: submitted as itself. "
                                                      "A run's forks: GET /runs?forked_from={id}.")

    pause_requested: bool = Field(False, description="A running run asked to pause: it stops at its "
                                                     "next step boundary (POST /runs/{id}/pause).")
    waiting: WaitingOut | None = Field(None, description=(
        "Why a queued run is not running, in the reads of runs (GET /runs, /runs/{id}, a "
        "thread's and a run's children); null for a run that is not queued, and in the "
        "answers of submit, cancel and retry."))
    outcome: str | None = Field(None, description=(
        "In the answer of a submit of a task with flow control (singleton, throttle, debounce, "
        "batch): new, replaced (`replaced` names the queued run cancelled for it), delayed (a "
        "throttle made it due later), debounced (this queued run of the key took the arguments), "
        "batched (this queued run of the key took the submission as one more item) or "
        "dropped (a throttle wrote nothing; this is the key's standing run). null elsewhere."))
    replaced: int | None = Field(None, description="The queued run a singleton's submit replaced.")

    @classmethod
    def of(cls, run: Run, waiting: Waiting | None = None) -> RunOut:
        # A tenant's run in the operator's view: its payloads sealed unless it decodes (this
        # run alone: a page holds several tenants' runs and the deployment's own).
        with sealed_view(sealed_for(run.tenant, f"run {run.id}")):
            args, result = run.arguments(), run.value()
        return cls(id=run.id, key=run.key, task=run.task, queue=run.queue, priority=run.priority,
                   state=run.state.value, args=args, attempt=run.attempt,
                   max_attempts=run.max_attempts, run_at=run.run_at, created_at=run.created_at,
                   started_at=run.started_at, finished_at=run.finished_at, result=result,
                   error=run.error_info(), thread=run.thread, parent_id=run.parent_id,
                   tenant=run.tenant, budget=json.loads(run.budget) if run.budget else None,
                   deadline_at=run.deadline_at, last_seq=run.last_seq, traceparent=run.traceparent,
                   version=run.version, pause_requested=run.pause_requested, forked_from=run.forked_from,
                   outcome=run.outcome, replaced=run.replaced,
                   waiting=None if waiting is None else WaitingOut(reason=waiting.reason, until=waiting.until,
                                                                   detail=waiting.detail))


class ForkIn(BaseModel):
    """A fork of a run: a new run whose journal holds the original's first entries (their
    recorded results replayed, nothing called again), which runs the rest on the code
    deployed now."""

    model_config = ConfigDict(extra="forbid")

    from_step: Annotated[int, Field(ge=0, le=inputs.MAX_ID)] | Annotated[
        str, Field(min_length=1, max_length=200)] = Field(description=(
            "A journal position N (the fork copies positions 0 to N-1), or a step's name (it "
            "copies every entry before the first step of that name). Past the journal's end, "
            "or a name it never journaled: 422."))
    args: dict[str, Any] | None = Field(None, description="Arguments to change, merged over the "
                                                          "original's.")
    key: str | None = Field(None, min_length=1, max_length=inputs.MAX_KEY_CHARS,
                            description="The fork's idempotency key: the same key again is the same fork.")


class RunPage(BaseModel):
    items: list[RunOut]
    next_cursor: int | None = Field(None, description="Pass as `before` for the next page.")

    @classmethod
    def page(cls, runs: list[Run], limit: int, waiting: dict[int, Waiting] | None = None) -> RunPage:
        """Runs read newest first, at most `limit`: only a full page can have a next one."""
        why = waiting or {}
        return cls(items=[RunOut.of(r, why.get(r.id)) for r in runs],
                   next_cursor=runs[-1].id if len(runs) == limit else None)


class EventOut(BaseModel):
    seq: int
    kind: str
    data: dict[str, Any]
    at: float

    @classmethod
    def of(cls, event: Event) -> EventOut:
        return cls(seq=event.seq, kind=event.kind, data=event.data, at=event.at)


class EventPage(BaseModel):
    items: list[EventOut]
    next_after: int


class ThreadEventOut(EventOut):
    """An event of a thread's log: `tseq` numbers it in the thread, `run_id`/`seq` in its run."""

    tseq: int
    run_id: int

    @classmethod
    def of_thread(cls, event: ThreadEvent) -> ThreadEventOut:
        return cls(tseq=event.tseq, run_id=event.run_id, seq=event.seq, kind=event.kind,
                   data=event.data, at=event.at)


class ThreadEventPage(BaseModel):
    items: list[ThreadEventOut]
    next_after: int = Field(description="Pass as `after` for the next page (a tseq).")
    incarnation: int = Field(description="The thread these tseqs number: pass as `incarnation` with "
                                         "`after`, so that a new thread of the name is never read "
                                         "on as this one (410 instead).")


class ThreadInfoOut(BaseModel):
    """A thread: its name within its tenant and its identity beyond the name."""

    thread: str
    tenant: str | None
    incarnation: int = Field(description="Which thread of this name: once a deleted thread's name is "
                                         "reused, the new thread has a larger one. Pass it as "
                                         "`incarnation` to read this thread only (410 once it is gone).")
    created_at: float

    @classmethod
    def of(cls, info: ThreadInfo) -> ThreadInfoOut:
        return cls(thread=info.thread, tenant=info.tenant, incarnation=info.incarnation,
                   created_at=info.created_at)


class ThreadOut(ThreadInfoOut):
    """A thread as a listing shows it: its identity and what its runs are."""

    tenant: str | None = Field(None, description="Whose thread it is; null: no tenant's (seen "
                                                 "only with an operator token).")
    created_at: float = Field(description="When its first run was submitted.")
    deleted: bool
    deleted_at: float | None = None
    runs: int = Field(description="Its runs kept (retention may have reclaimed older ones).")
    open_runs: int = Field(description="Its queued and running runs.")
    busy: bool = Field(description="It has an open run: a submission meets its busy policy.")
    last_run_id: int | None = Field(None, description="Its newest run kept.")
    last_run_state: str | None = None

    @classmethod
    def of(cls, info: ThreadInfo) -> ThreadOut:
        return cls(thread=info.thread, tenant=info.tenant, incarnation=info.incarnation,
                   created_at=info.created_at, deleted=info.deleted, deleted_at=info.deleted_at,
                   runs=info.runs, open_runs=info.open_runs, busy=info.busy,
                   last_run_id=info.last_run_id,
                   last_run_state=None if info.last_run_state is None else info.last_run_state.value)


class ThreadPage(BaseModel):
    items: list[ThreadOut]
    next_cursor: str | None = Field(None, description="Pass as `after` for the next page.")


def cursor_of(info: ThreadInfo) -> str:
    """The opaque text of the cursor after this thread: its creation time (exact, as
    JSON writes a double) and its identity."""
    text = json.dumps([info.created_at, info.tenant, info.thread])
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def thread_cursor(text: str) -> ThreadCursor:
    """The cursor `cursor_of` wrote (InvalidInput for any other text): it decodes to a
    listed thread's creation time, tenant and name, each what `inputs` says it may be
    (a forged one may hold a NUL, a lone surrogate, an infinite time...)."""
    try:
        created_at, tenant, thread = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        inputs.number(created_at, "created_at", 0, inputs.MAX_EPOCH_S)
        inputs.thread_name(thread)
        if tenant is not None:
            inputs.tenant(tenant)
    except (ValueError, TypeError, binascii.Error):  # InvalidInput is a ValueError
        raise InvalidInput("after: not a cursor this server gave (pass a page's next_cursor)") from None
    return ThreadCursor(float(created_at), tenant, thread)
