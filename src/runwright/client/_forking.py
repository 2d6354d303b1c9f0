"""Forks: a new run that begins where another run was at a step of its journal.

A fork's journal is a copy of the original's first entries (its positions below the step
forked from), made by the store in the same write as the fork's insert (`run_fork`): its
worker replays them (their recorded results, nothing executed again) and runs the rest on
the code deployed now. What the copy holds and what it does not is in the README
("Forking a run from a step").

The insert is built here, above every backend: the original's task, queue and priority,
its arguments with the edits given merged over them, and its budget counted again from
now. Where this process registers the task (an App with the task's module, a server),
the edited arguments are checked against today's signature, and the fork takes today's
retry policy, timeout and version; elsewhere (the CLI without an app) it keeps the
original's, and records no version, so any worker that registers the task may run it.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from ..core import _inputs as inputs
from ..core._journal import StepRecord
from ..errors import InvalidInput, KeyConflict
from ..runs import Run
from ..store._params import RunInsertParams
from ..tasks._budget import Budget
from ..tasks._limits import Limits
from ..tasks._specs import TaskSpec
from ..tasks._submission import Submission, fresh_key, insert_params

__all__ = ["check_fork_key", "failing_step", "fork_insert", "fork_step"]

MAX_STEP_NAME = 200  # a step's name is the task's own: this only bounds what is sent


def fork_step(value: Any) -> int | str:
    """`from_step` as a fork takes it: a journal position (an int >= 0) or a step's name."""
    if isinstance(value, str):
        if not value or len(value) > MAX_STEP_NAME:
            raise InvalidInput(f"from_step names a step: 1 to {MAX_STEP_NAME} characters, got {value!r}")
        return value
    return inputs.integer(value, "from_step", 0, inputs.MAX_ID)


def fork_insert(original: Run, spec: TaskSpec | None, edits: Mapping[str, Any] | None, key: str | None,
                *, now_s: float, limits: Limits, version: str | None = None) -> RunInsertParams:
    """The insert of a fork of `original` (see the module docstring); `spec` is today's
    task where this process registers it."""
    if edits is not None and not isinstance(edits, Mapping):
        raise InvalidInput(f"args of a fork is a JSON object of the arguments to change, got {edits!r}")
    arguments = {**original.arguments(), **(edits or {})}
    budget = Budget.from_json(original.budget) if original.budget else None
    if spec is not None:
        submission = Submission(key=key, queue=original.queue, priority=original.priority, budget=budget,
                                tenant=original.tenant)
        return insert_params(spec, spec.bind((), arguments), submission, now_s=now_s, limits=limits,
                             version=version)
    if key is not None:
        inputs.key(key)
    return RunInsertParams(
        key=key or fresh_key(), key_is_fresh=key is None, task=original.task,
        args=limits.payload(arguments, f"arguments of task {original.task!r}"),
        queue=original.queue, priority=original.priority, max_attempts=original.max_attempts,
        timeout_s=original.timeout_s, budget=original.budget,
        deadline_at=now_s + budget.deadline_s if budget and budget.deadline_s else None,
        tenant=original.tenant, now=now_s)


def check_fork_key(fork: Run, original: Run, params: RunInsertParams) -> None:
    """A key that named a run already gives that run only when it is a fork of `original`
    of the same task: else KeyConflict, as a submission's key naming another run."""
    if not fork.existed or params.key_is_fresh:
        return
    if fork.forked_from != original.id or fork.task != params.task:
        what = "a submission" if fork.forked_from is None else f"a fork of run {fork.forked_from}"
        raise KeyConflict(params.key, fork.id, ["forked_from"],
                          f"{what}, not a fork of run {original.id}")


def failing_step(journal: Sequence[StepRecord]) -> int:
    """Where a fork "from the failing step" starts: the position of the journal's first
    failed entry (it runs again), else the journal's end (a run that failed between steps
    replays them all and goes on from there)."""
    failed = [record.position for record in journal if record.status == "failed"
              and json.loads(record.error or "{}").get("type") != "OutcomeUnknown"]
    if failed:
        return min(failed)
    return journal[-1].position + 1 if journal else 0
