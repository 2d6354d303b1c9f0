"""Replay before you ship, for CI and the command line: the journals of chosen runs (from
the store, or from a file `export_runs` wrote) replayed on the code of an App, executing
no step and writing nothing (`engine._replayer`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..client._scope import RunScope
from ..core._events import EventWait
from ..core._journal import StepRecord
from ..core._questions import Question
from ..engine._context import QUESTIONS_READ
from ..engine._replayer import ReplayOutcome, Waits, replay_run
from ..errors import InvalidInput
from ..runs import Run, RunState
from ..store._event_params import EventWaitListParams
from ..store._params import QuestionListParams

__all__ = ["ReplayOutcome", "export_runs", "replay"]

# The live, parked and recently ended runs a replay reads by default.
DEFAULT_STATES = (RunState.QUEUED, RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD)
MAX_RUNS = 10_000


async def replay(app: RunScope, *, source: str | Path | None = None, task: str | None = None,
                 states: Sequence[RunState] = DEFAULT_STATES, created_after: float | None = None,
                 limit: int = 1000) -> list[ReplayOutcome]:
    """Replay runs on `app`'s code (the App or one tenant's view of it): those of the
    store (newest first, by task, state and age), or those of a file written by
    `export_runs` (`source`). One outcome a run; `ok` False where the code would break it."""
    if source is not None:
        return [await replay_run(app._runtime, run, journal, waits)
                for run, journal, waits in _read(Path(source))]
    outcomes = []
    async for run in _chosen(app, task, states, created_after, limit):
        journal = await app._runtime.store.step_list(run.id)
        outcomes.append(await replay_run(app._runtime, run, journal, await _waits(app, run, journal)))
    return outcomes


async def export_runs(app: RunScope, path: str | Path, *, task: str | None = None,
                      states: Sequence[RunState] = DEFAULT_STATES, created_after: float | None = None,
                      limit: int = 1000) -> int:
    """Write the chosen runs with their journals to `path` (JSON lines), for a CI job to
    replay on the next version's code without the store; returns how many."""
    count = 0
    with open(path, "w") as out:
        async for run in _chosen(app, task, states, created_after, limit):
            journal = await app._runtime.store.step_list(run.id)
            waits = await _waits(app, run, journal)
            out.write(json.dumps({"run": _run_json(run), "journal": [dataclasses.asdict(r) for r in journal],
                                  "questions": [dataclasses.asdict(q) for q in waits.questions],
                                  "event_waits": [dataclasses.asdict(w) for w in waits.events]}) + "\n")
            count += 1
    return count


async def _chosen(app: RunScope, task: str | None, states: Sequence[RunState], created_after: float | None,
                  limit: int) -> Any:
    if not isinstance(limit, int) or not 1 <= limit <= MAX_RUNS:
        raise InvalidInput(f"limit must be an integer in 1..{MAX_RUNS}, got {limit!r}")
    before, seen = None, 0
    while seen < limit:
        want = min(100, limit - seen)
        page = await app.list_runs(states=states, task=task, created_after=created_after, limit=want,
                                   before_id=before)
        for run in page:
            yield run
        seen += len(page)
        if len(page) < want:
            return
        before = page[-1].id


async def _waits(app: RunScope, run: Run, journal: Sequence[StepRecord]) -> Waits:
    """What the run waits on that its journal does not hold: a question (journaled once
    answered), an event wait (journaled once its event is taken). A replay needs them to
    tell a run waiting at a position from one whose journal merely ends there."""
    positions = {record.position for record in journal}
    store = app._runtime.store
    asked = await store.question_list(QuestionListParams(run.id, pending=False, limit=QUESTIONS_READ))
    waits = await store.event_wait_list(EventWaitListParams(run.id))
    return Waits([q for q in asked if q.id not in positions],
                 [w for w in waits if w.position not in positions])


def _run_json(run: Run) -> dict[str, Any]:
    fields = dataclasses.asdict(run)
    fields["state"] = run.state.value
    fields.pop("existed", None)
    return fields


def _read(path: Path) -> Iterator[tuple[Run, list[StepRecord], Waits]]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        try:
            item = json.loads(line)
            fields = dict(item["run"])
            fields["state"] = RunState(fields["state"])
            # A file written before waits were exported holds none.
            yield (Run(**fields), [StepRecord(**r) for r in item["journal"]],
                   Waits([Question(**q) for q in item.get("questions", [])],
                         [EventWait(**w) for w in item.get("event_waits", [])]))
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(f"{path}:{number}: not a run that export_runs wrote ({exc})") from None
