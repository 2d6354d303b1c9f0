"""The rules of flow control per key at submission (tasks._flow), decided once for every
backend: what an insert of a run that carries a singleton, throttle, debounce or batch does.

Each key has one pointer in the store (SQL: a row of `flow_keys`, locked FOR UPDATE;
Redis: a field of the `flow` hash, checked by the script that applies): the id of the
key's latest run and the due time it was given. A backend reads the pointer and the run
it names under the key's lock (or re-checks them where it writes), asks `plan`, and
applies the plan in the write that inserts: concurrent submitters of one key, in any
processes, are put in one order, and each sees what the one before it did.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from ..errors import InvalidInput, SingletonTaken
from ..runs import RETRYABLE_STATES, Run, RunState, WaitReason
from ._params import RunInsertParams

__all__ = ["BATCHED", "DEBOUNCED", "DELAYED", "DROPPED", "KEEPING_STATES", "MAX_PERIOD_S", "NEW",
           "NO_NEW_RUN", "REPLACED", "Flow", "FlowPlan", "Standing", "has_flow", "items_of", "parsed", "plan",
           "refuse_flow_in", "replaced_reason", "unneeded"]

# What a submission did (Run.outcome).
NEW, REPLACED, DELAYED, DEBOUNCED, DROPPED = "new", "replaced", "delayed", "debounced", "dropped"
BATCHED = "batched"
# The outcomes whose submission made no run: it joined, or was answered with, the key's.
NO_NEW_RUN = (DEBOUNCED, BATCHED, DROPPED)
_OPEN = (RunState.QUEUED, RunState.RUNNING)
# The longest throttle period, debounce window and batch wait (tasks._flow checks them).
MAX_PERIOD_S = 86_400.0
# The states of a key's run that keep the key's record: open, or open again by a manual
# retry (a record removed under a dead run that is retried would let a singleton's next
# submission beside it). Past them (succeeded, cancelled, interrupted, or the run
# reclaimed) a record says nothing a decision needs: with no record the key has no
# standing run, which is what a run in those states is to every kind but a throttle. A
# throttle's record is also kept until MAX_PERIOD_S after its due time (the store does
# not keep a key's period: the longest one bounds every one).
KEEPING_STATES = tuple(sorted(state.value for state in (*_OPEN, *RETRYABLE_STATES)))


@dataclass(frozen=True, slots=True)
class Flow:
    """One run's flow control, as tasks._flow.FlowOf.of writes it."""

    kind: str  # "singleton", "throttle", "debounce", "batch"
    name: str
    key: str
    mode: str  # singleton: "refuse" | "replace"; throttle: "drop" | "delay"; debounce: ""; batch: max_items
    seconds: float  # throttle: per_s; debounce: window_s; batch: max_wait_s

    @property
    def slot(self) -> str:
        """The pointer's name: one key of one declaration."""
        return f"{self.kind}:{self.name}:{self.key}"


def parsed(text: str) -> Flow:
    kind, name, key, mode, seconds = json.loads(text)
    return Flow(str(kind), str(name), str(key), str(mode), float(seconds))


@dataclass(frozen=True, slots=True)
class Standing:
    """The key's latest run (the pointer's, still stored) and the due time it was given."""

    run: Run
    at: float


@dataclass(frozen=True, slots=True)
class FlowPlan:
    """`action`: "insert" a new run due at `run_at` (cancelling the queued run `cancel`
    first, if any; its `waiting` recorded); "update" the standing run: the submission's
    arguments (or their merge: a batch's item appended), due at `run_at`, an event of
    kind `outcome` logged; "drop": nothing written, the standing run answers."""

    action: str
    outcome: str
    run_at: float
    cancel: int | None = None
    waiting: str | None = None


def plan(flow: Flow, standing: Standing | None, wanted_at: float, now: float, task: str,
         items: int | None = None) -> FlowPlan:
    """What a submission of a run due at `wanted_at` (its delay or run_at, else now) does,
    given the key's standing run (and, for a batch, how many items that run holds);
    raises SingletonTaken for a refusal (nothing written)."""
    run = None if standing is None else standing.run
    if flow.kind == "singleton":
        if run is None or run.state not in _OPEN:
            return FlowPlan("insert", NEW, wanted_at)
        # Only a run that never started is replaced: one that did (parked, between
        # attempts) is as good as running, with its journal and perhaps its children.
        if flow.mode == "replace" and run.state is RunState.QUEUED and run.started_at is None:
            return FlowPlan("insert", REPLACED, wanted_at, cancel=run.id)
        raise SingletonTaken(task, flow.key, run.id, run.state.value)
    if flow.kind == "debounce":
        due = max(wanted_at, now + flow.seconds)
        # A queued run of the key not yet started takes the new arguments; a paused one
        # is the operator's (only a resume moves it), so a new window opens beside it.
        if _joinable(run):
            return FlowPlan("update", DEBOUNCED, due)
        return FlowPlan("insert", NEW, due)
    if flow.kind == "batch":
        most = int(flow.mode)
        if _joinable(run) and items is not None and items < most:
            assert run is not None
            # The submission that fills the batch makes it due now; the others leave the
            # due time its first submission gave it.
            return FlowPlan("update", BATCHED, min(now, run.run_at) if items + 1 >= most else run.run_at)
        return FlowPlan("insert", NEW, wanted_at if most == 1 else max(wanted_at, now + flow.seconds))
    if flow.kind == "throttle":
        if standing is None or wanted_at >= standing.at + flow.seconds:
            return FlowPlan("insert", NEW, wanted_at)
        if flow.mode == "drop":
            return FlowPlan("drop", DROPPED, standing.at)
        return FlowPlan("insert", DELAYED, standing.at + flow.seconds, waiting=WaitReason.THROTTLE.value)
    raise ValueError(f"unknown flow control {flow.kind!r}")


def _joinable(run: Run | None) -> bool:
    """Whether a submission may still change the key's run (a debounce, a batch): queued
    and never started; a paused one is the operator's (only a resume moves it), so a new
    window or batch opens beside it."""
    return (run is not None and run.state is RunState.QUEUED and run.started_at is None
            and run.waiting != WaitReason.PAUSED)


def items_of(p: RunInsertParams, standing: Standing | None) -> int | None:
    """How many items the key's standing run holds, for a batch's submission (None else)."""
    if p.items is None or standing is None or standing.run.args is None:
        return None
    return p.items(standing.run.args)


def unneeded(slot: str, at: float | None, state: str | None, now: float) -> bool:
    """Whether a key's record may go (see KEEPING_STATES): `state` is its run's (None: the
    run is gone), `at` the due time it was given. What each backend's removal judges again
    under the key's lock (SQL: _FLOW_UNNEEDED; Redis: flow_reclaim.lua)."""
    if state in KEEPING_STATES:
        return False
    return not slot.startswith("throttle:") or at is None or at < now - MAX_PERIOD_S


def has_flow(params: Sequence[RunInsertParams]) -> bool:
    return any(p.flow is not None for p in params)


def refuse_flow_in(params: Sequence[RunInsertParams]) -> None:
    """The caller's transaction cannot hold the key's lock the store's decision needs."""
    if has_flow(params):
        raise InvalidInput("a run with flow control (singleton, throttle, debounce or batch) is submitted "
                           "through the store's own insert, not in the caller's transaction")


def replaced_reason(run_id: int | str) -> str:
    """The reason a replaced singleton run is cancelled with."""
    return f"replaced by run {run_id} (singleton)"
