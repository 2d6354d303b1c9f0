"""Replay before you ship: run recorded journals against the code loaded here, executing no
step and writing nothing, and say per run whether the code replays it cleanly or where it
diverges.

A run's function runs from the top in a Context whose journal is the run's whole journal
and whose store only reads: every durable operation finds its journaled outcome and
returns it (a step's result, a signal's payload, a child), as on a takeover. The replay
ends cleanly where the journal ends (the next operation would be new work), where the run
parks or returns, or where it raises the error its journal holds; it diverges where the
code asks for another operation than the journal holds (NonDeterminismError), or where
the journal ends where the run waits on what it registered there, unjournaled (a question
it asked, journaled once answered; an event wait, journaled once its event is taken), and
the code does anything there but that; it fails where the code raises anything else, or
tries to write outside a journaled step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from ..core._events import EventWait
from ..core._journal import StepRecord
from ..core._questions import Question
from ..errors import NonDeterminismError, StepFailed
from ..runs import Run
from ._context import CURRENT, Context, DryReplayEnd
from ._events import EVENT_STEP
from ._parking import Interrupted, Park
from ._runtime import Runtime

__all__ = ["ReplayOutcome", "Waits", "replay_run"]

# What a replay may read of the store (everything else is a write, or not needed).
_READS = ("run_get", "run_get_many", "step_list", "step_list_resumable", "event_list", "thread_messages",
          "thread_get", "question_list", "signal_list", "run_list", "listen", "hub", "clock", "url")


@dataclass(frozen=True)
class ReplayOutcome:
    """One run's replay: `status` "clean", "diverged" or "failed"; `position` where it
    stopped (the journal entries it replayed); `detail` why, in words."""

    run_id: int
    task: str
    status: str
    position: int
    detail: str

    @property
    def ok(self) -> bool:
        return self.status == "clean"

    def as_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "task": self.task, "status": self.status, "position": self.position,
                "detail": self.detail}


@dataclass(frozen=True)
class Waits:
    """What a run waits on that its journal does not hold yet: the questions it asked
    (journaled once answered) and the event waits it registered (journaled once taken)."""

    questions: Sequence[Question] = ()
    events: Sequence[EventWait] = ()


class _ReadOnlyStore:
    """The store as a replay sees it: reads pass, but for the replayed run's questions and
    event waits, which are those the replay was given (a file's run is not the store's); a
    thread append (made by agents as they go, idempotent by position) is taken as done; any
    other write stops the replay."""

    def __init__(self, store: Any, run_id: int, waits: Waits) -> None:
        self._store = store
        self._run_id, self._waits = run_id, waits

    def __getattr__(self, name: str) -> Any:
        if name == "question_list":
            async def questions(params: Any) -> list[Question]:
                if params.run_id == self._run_id:
                    return [q for q in self._waits.questions if not (params.pending and q.answered)]
                return list(await self._store.question_list(params))

            return questions
        if name == "event_wait_list":
            async def event_waits(params: Any) -> list[EventWait]:
                return list(self._waits.events) if params.run_id == self._run_id else []

            return event_waits
        if name in _READS:
            return getattr(self._store, name)
        if name == "thread_append":
            async def appended(_params: Any) -> bool:
                return True

            return appended
        raise _WroteOutside(name)


class _WroteOutside(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(f"the code wrote ({name}) outside a journaled step")


async def replay_run(runtime: Runtime, run: Run, journal: Sequence[StepRecord],
                     waits: Waits = Waits()) -> ReplayOutcome:
    """Replay `run` on the task of that name in `runtime`'s registry, over `journal` and
    what the run waits on that the journal does not hold yet (`waits`)."""
    spec = runtime.registry.tasks.get(run.task)
    if spec is None:
        return ReplayOutcome(run.id, run.task, "failed", 0, f"this code has no task {run.task!r}")
    dry = replace(runtime, store=_ReadOnlyStore(runtime.store, run.id, waits))
    ctx = Context(dry, run, worker_id=0, journal=journal, dry=True)
    positions = {record.position for record in journal}
    CURRENT.set(ctx)
    end = max((r.position for r in journal), default=-1) + 1
    try:
        await spec.invoke(ctx, spec.received(run.args))
    except DryReplayEnd as stop:
        waiting = _waiting_at(waits, stop) if stop.position not in positions else None
        if waiting is not None:
            return ReplayOutcome(run.id, run.task, "diverged", stop.position, (
                f"run {run.id}: step #{stop.position} is {stop.name!r} in this replay, but the run "
                f"{waiting}; the task's code changed its steps"))
        return ReplayOutcome(run.id, run.task, "clean", stop.position,
                             f"replayed all {end} journal entries; the code goes on with {stop.name!r}")
    except NonDeterminismError as exc:
        return ReplayOutcome(run.id, run.task, "diverged", ctx.next_position - 1, str(exc))
    except (Park, Interrupted):
        return ReplayOutcome(run.id, run.task, "clean", ctx.next_position,
                             "replayed to where the run waits")
    except StepFailed as exc:
        return ReplayOutcome(run.id, run.task, "clean", ctx.next_position,
                             f"replayed to its journaled failure: {exc}")
    except _WroteOutside as exc:
        return ReplayOutcome(run.id, run.task, "failed", ctx.next_position, str(exc))
    except Exception as exc:  # the code itself broke on the run's recorded history
        return ReplayOutcome(run.id, run.task, "failed", ctx.next_position,
                             f"{type(exc).__name__}: {exc}")
    finally:
        CURRENT.set(None)
    return ReplayOutcome(run.id, run.task, "clean", ctx.next_position, "replayed to the run's end")


def _waiting_at(waits: Waits, stop: DryReplayEnd) -> str | None:
    """What the run waits on at the replay's end, if the code does something else there."""
    for question in waits.questions:
        if question.id == stop.position and stop.asks != question.kind:
            text = f" ({question.text!r})" if question.text else ""
            return f"asked a {question.kind} there{text} and waits on it or its answer"
    for wait in waits.events:
        if wait.position == stop.position and stop.name != f"{EVENT_STEP}{wait.name}":
            return f"waits there for event {wait.name!r}"
    return None
