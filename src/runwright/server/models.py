"""Request and response bodies: validated by Pydantic, published in the OpenAPI document."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..journal import Event, ThreadEvent
from ..runs import Run

__all__ = ["EventOut", "EventPage", "RunOut", "RunPage", "SubmitIn", "ThreadEventOut", "ThreadEventPage"]


class SubmitIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(description="A registered task or a built-in job type (webhook, llm, chain).")
    args: dict[str, Any] = Field(default_factory=dict, description="The task's keyword arguments.")
    key: str | None = Field(None, max_length=512,
                            description="Idempotency key: the same key is the same run.")
    priority: int | None = Field(None, ge=0, le=32767, description="0 critical .. 3 low.")
    delay_s: float | None = Field(None, ge=0)
    queue: str | None = Field(None, max_length=200)
    thread: str | None = Field(None, max_length=256)
    on_busy: str = Field("reject", pattern="^(reject|enqueue|interrupt|rollback)$")


class RunOut(BaseModel):
    id: int
    key: str
    task: str
    queue: str
    priority: int
    state: str
    args: dict[str, Any]
    attempt: int
    max_attempts: int
    run_at: float
    created_at: float
    started_at: float | None
    finished_at: float | None
    result: Any = None
    error: dict[str, Any] | None = None
    thread: str | None = None
    parent_id: int | None = None
    last_seq: int

    @classmethod
    def of(cls, run: Run) -> RunOut:
        return cls(id=run.id, key=run.key, task=run.task, queue=run.queue, priority=run.priority,
                   state=run.state.value, args=run.arguments(), attempt=run.attempt,
                   max_attempts=run.max_attempts, run_at=run.run_at, created_at=run.created_at,
                   started_at=run.started_at, finished_at=run.finished_at, result=run.value(),
                   error=run.error_info(), thread=run.thread, parent_id=run.parent_id,
                   last_seq=run.last_seq)


class RunPage(BaseModel):
    items: list[RunOut]
    next_cursor: int | None = Field(None, description="Pass as `before` for the next page.")


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
