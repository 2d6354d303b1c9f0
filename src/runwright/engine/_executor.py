"""The executor: one attempt of one run, and the fenced finish that records its end.

It decides nothing about claims or leases; it turns "how the function ended" (a value,
an error, a timeout, or a stop the worker asked for) into a RunFinishParams.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ..core._clock import Clock
from ..core._resilience import through_blinks
from ..errors import DeploymentMoved, LeaseLost, PayloadTooLarge, SerializationError, TaskTimeout
from ..observe._logs import event
from ..runs import PAUSED_RUN_AT, Run, RunState, WaitReason
from ..store._params import RunFinishParams
from ..store._rules import cancelled_error
from ..tasks._serde import encode_error
from ._context import CURRENT, Context
from ._parking import Interrupted, Park, Paused, RunControl

if TYPE_CHECKING:
    from ..tasks._specs import TaskSpec
    from ._runtime import Runtime

__all__ = ["Active", "Stop", "run_attempt"]

DEBUG, INFO, WARNING = logging.DEBUG, logging.INFO, logging.WARNING


class Stop(enum.Enum):
    """Why the worker cancelled a run's coroutine: each ends the run differently."""

    CANCEL = "cancel requested"  # -> cancelled
    LEASE_LOST = "lease lost"  # -> nothing written: the new owner decides
    SHUTDOWN = "worker stopping"  # -> given back (queued), attempt not counted


@dataclass(slots=True)
class Active:
    """A run in flight on this worker."""

    run: Run
    task: asyncio.Task[None]
    stop: Stop | None = None
    finishing: bool = False  # the function returned; its fenced write is on its way
    control: RunControl = field(default_factory=RunControl)
    cohort: int = 0  # the claim that started it (see Worker._gathering)

    def interrupt(self, why: Stop) -> None:
        # Once the function has returned there is nothing to stop: its write goes out and
        # the fence decides (a refusal comes back as LeaseLost).
        if self.stop is None and not self.finishing:
            self.stop = why
            self.control.stopping = True  # what a blocking function in a thread can see
            self.task.cancel()


async def run_attempt(runtime: Runtime, run: Run, worker_id: int, stop_of: Callable[[], Stop | None],
                      control: RunControl | None = None) -> RunFinishParams | None:
    """Run the function once; return the finish to write (None: write nothing)."""
    spec = runtime.registry.tasks[run.task]
    try:
        # The first claim (fence 1) cannot have a journal yet: skip the read. A fork is born
        # at fence 1 (`RunStore.run_fork`), so its first claim reads the journal it was given.
        # From its last snapshot on: a long run resumes in the time of its last few steps.
        journal = await through_blinks(runtime.store.step_list_resumable, run.id) if run.fence > 1 else []
        ctx = Context(runtime, run, worker_id, journal, control)
        CURRENT.set(ctx)  # this asyncio task is the run's own: nothing to reset
        if spec.timeout_s is None:  # no timeout context: it costs a task lookup per run
            value = await spec.invoke(ctx, spec.received(run.args))
        else:
            async with asyncio.timeout(spec.timeout_s):
                value = await spec.invoke(ctx, spec.received(run.args))
        result = await runtime.limits.stored(value, f"result of task {run.task!r}")
    except Park as park:
        return _parked(run, park, worker_id)
    except Paused:
        event(INFO, "run paused at a step boundary, on request", run_id=run.id, attempt=run.attempt,
              worker=worker_id)
        return _held(run)
    except Interrupted as stop:
        event(INFO, f"run interrupted ({stop.mode}) by a newer run on its thread", run_id=run.id,
              attempt=run.attempt, worker=worker_id)
        return RunFinishParams(run.id, run.fence, RunState.INTERRUPTED,
                               event_data=json.dumps({"mode": stop.mode}),
                               error=json.dumps({"type": "Interrupted", "message": str(stop)}))
    except asyncio.CancelledError:
        why = stop_of()
        if why is None:
            raise  # the worker itself is being torn down
        return _stopped(run, why, worker_id)
    except TimeoutError as exc:
        timeout = TaskTimeout(f"attempt {run.attempt} ran past timeout_s={spec.timeout_s}")
        timeout.__cause__ = exc
        return _failed(run, spec, timeout, worker_id, runtime.clock)
    except LeaseLost as exc:
        event(WARNING, f"{exc}; run abandoned to its new owner", run_id=run.id,
              attempt=run.attempt, worker=worker_id, fence=run.fence)
        return None
    except DeploymentMoved as exc:
        # A write of the run refused by a store `runwright move` sealed: not the task's
        # failure, and nothing can be written here; the run goes on where the store went
        # (given back there, from its journal).
        event(WARNING, f"{exc}; run left to the store the deployment moves to", run_id=run.id,
              attempt=run.attempt, worker=worker_id, fence=run.fence)
        return None
    except Exception as exc:
        return _failed(run, spec, exc, worker_id, runtime.clock)
    event(DEBUG, "run succeeded", run_id=run.id, attempt=run.attempt, worker=worker_id)
    return RunFinishParams(run.id, run.fence, RunState.SUCCEEDED, result=result)


def _parked(run: Run, park: Park, worker_id: int) -> RunFinishParams:
    """Give the slot back until `park.until`; the attempt goes on when the run is resumed."""
    event(DEBUG, f"run parked ({park.reason})", run_id=run.id, attempt=run.attempt,
          worker=worker_id, until=round(park.until, 3))
    return RunFinishParams(run.id, run.fence, RunState.QUEUED, release=True, run_at=park.until,
                           event_kind="parked", waiting=park.waits_on,
                           event_data=json.dumps({"until": park.until, "reason": park.reason}))


def _held(run: Run, error: str | None = None, event_data: str = "{}") -> RunFinishParams:
    """Give the slot back and hold the run until a resume: paused (rules.plan_pause), its
    journal kept, its attempt not counted. `error`: the failure it paused on, kept on the
    run (on_exhausted="pause"); its step runs again once resumed."""
    return RunFinishParams(run.id, run.fence, RunState.QUEUED, release=True, error=error,
                           run_at=PAUSED_RUN_AT, waiting=WaitReason.PAUSED, event_kind="paused",
                           event_data=event_data)


def _stopped(run: Run, why: Stop, worker_id: int) -> RunFinishParams | None:
    fields = dict(run_id=run.id, attempt=run.attempt, worker=worker_id, fence=run.fence)
    if why is Stop.LEASE_LOST:
        event(WARNING, "lease lost: run abandoned to its new owner", **fields)
        return None
    if why is Stop.CANCEL:
        event(INFO, "run cancelled", **fields)
        return RunFinishParams(run.id, run.fence, RunState.CANCELLED, error=cancelled_error())
    event(INFO, "run given back (worker stopping)", **fields)
    return RunFinishParams(run.id, run.fence, RunState.QUEUED, release=True)


def _failed(run: Run, spec: TaskSpec, error: BaseException, worker_id: int,
            clock: Clock) -> RunFinishParams:
    """Retry after backoff, or end: `failed` for a final error, `dead` when out of attempts."""
    fields = dict(run_id=run.id, attempt=run.attempt, worker=worker_id, task=run.task,
                  error=f"{type(error).__name__}: {error}")
    detail = encode_error(error)
    if spec.retry.is_final(error) or isinstance(error, (SerializationError, PayloadTooLarge)):
        event(WARNING, "run failed (final error, no retry)", **fields)
        return RunFinishParams(run.id, run.fence, RunState.FAILED, error=detail,
                               event_data=_summary(error, attempt=run.attempt))
    if run.attempt >= run.max_attempts and spec.retry.on_exhausted == "pause":
        event(WARNING, "run paused: attempts exhausted (on_exhausted='pause')", **fields)
        return _held(run, error=detail, event_data=_summary(error, attempt=run.attempt))
    if run.attempt >= run.max_attempts:
        event(WARNING, "run dead: attempts exhausted", **fields)
        return RunFinishParams(run.id, run.fence, RunState.DEAD, error=detail,
                               event_data=_summary(error, attempt=run.attempt))
    delay_s = spec.retry.backoff.delay_s(run.attempt)
    event(INFO, "run retrying", retry_in_s=round(delay_s, 3), **fields)
    return RunFinishParams(run.id, run.fence, RunState.QUEUED, error=detail, run_at=clock() + delay_s,
                           waiting=WaitReason.RETRY,
                           event_data=_summary(error, attempt=run.attempt, retry_in_s=delay_s))


def _summary(error: BaseException, **fields: object) -> str:
    return json.dumps({**fields, "error": f"{type(error).__name__}: {error}"[:500]})
