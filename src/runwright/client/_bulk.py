"""Bulk actions over a filter of runs: retry, cancel, resume, or fork from the failing step
every run that matches (task, state, error text, queue, submission time; a tenant's own runs
in its view), with a dry run that counts and samples first, a cap, progress, and a report of
what was refused and why.

Each run is acted on alone, by the same checked, fenced operation as one by id (`retry`,
`cancel`, `resume`, `fork`), so a second bulk action running beside this one changes nothing
twice: the run it reaches second is refused (RunNotRetryable, RunNotPaused, RunEnded), named
in its report. A bulk fork forks each run from its failing step under a key of that run and
step (`fork_key`): a second bulk fork of the same run finds that fork (refused: forked
already), never makes another.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from ..core import _inputs as inputs
from ..core._journal import StepRecord
from ..errors import InvalidInput, InvalidTransition, KeyConflict, RunNotFound, ThreadDeleted
from ..runs import Run, RunState, WaitReason
from ._forking import failing_step

__all__ = ["AT_ONCE", "BULK_ACTIONS", "BulkActions", "BulkReport", "each_at_once", "fork_key"]

# What each action does, and the states it looks for when the filter names none.
BULK_ACTIONS = {"retry": (RunState.DEAD, RunState.FAILED), "cancel": (RunState.QUEUED, RunState.RUNNING),
                "resume": (RunState.QUEUED,), "fork": (RunState.DEAD, RunState.FAILED)}
# What an action takes of the runs in its states: resume, the paused ones only.
BULK_WAITING = {"resume": WaitReason.PAUSED}
MAX_BULK = 100_000
SAMPLE = 10
PAGE = 500
# Runs of a page acted on at once. One at a time, a bulk retry of 10,000 dead runs took 66 s
# on PostgreSQL, 3.4x what a caller gathering retries by id took (benchmarks/bulk.py): each
# retry is a few round trips, and the store's pool answers many at once. Each run is still
# its own checked, fenced operation, so nothing about a race changes.
AT_ONCE = 32


async def each_at_once(items: Sequence[Any], act: Callable[[Any], Awaitable[None]],
                       at_once: int = AT_ONCE) -> None:
    """`act(item)` for every item, at most `at_once` of them running at a time."""
    for i in range(0, len(items), at_once):
        await asyncio.gather(*(act(item) for item in items[i:i + at_once]))


@dataclass
class BulkReport:
    """What a bulk action matched, did, and was refused (run id -> why); with `dry_run`,
    only what it matched and a sample of it. `capped`: more runs matched than `limit`."""

    action: str
    dry_run: bool
    matched: int = 0
    done: list[int] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)
    sample: list[int] = field(default_factory=list)
    capped: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"action": self.action, "dry_run": self.dry_run, "matched": self.matched, "done": self.done,
                "refused": {str(k): v for k, v in self.refused.items()}, "sample": self.sample,
                "capped": self.capped}


class BulkActions(ABC):
    """`bulk` of a scope (`RunScope` mixes this in, and gives the rest)."""

    @abstractmethod
    async def list_runs(self, *, states: Sequence[RunState] = (), task: str | None = None,
                        queue: str | None = None, created_after: float | None = None,
                        created_before: float | None = None, limit: int = 100, before_id: int | None = None,
                        waiting: WaitReason | str | None = None, error: str | None = None) -> list[Run]: ...

    @abstractmethod
    async def cancel(self, run_id: int) -> Run: ...

    @abstractmethod
    async def retry(self, run_id: int) -> Any: ...

    @abstractmethod
    async def resume(self, run_id: int) -> Run: ...

    @abstractmethod
    async def fork(self, run_id: int, from_step: int | str, *, args: Any = None,
                   key: str | None = None) -> Any: ...

    @abstractmethod
    async def steps(self, run_id: int) -> list[StepRecord]: ...

    async def bulk(self, action: str, *, states: Sequence[RunState | str] = (), task: str | None = None,
                   queue: str | None = None, error: str | None = None, created_after: float | None = None,
                   created_before: float | None = None, limit: int = 1000, dry_run: bool = False,
                   progress: Callable[[int, int], None] | None = None) -> BulkReport:
        """Retry, cancel, resume or fork (`action`) every run of this scope that matches the
        filter, newest first, at most `limit`; `states` defaults to the action's (dead and
        failed runs for retry and fork, queued and running ones for cancel; resume takes the
        paused runs). A fork forks each run from its failing step (`_forking.failing_step`)
        under `fork_key`. `dry_run`: count and sample, change nothing. `progress(acted,
        matched_so_far)` is called after each page."""
        if action not in BULK_ACTIONS:
            raise InvalidInput(f"a bulk action is one of {', '.join(BULK_ACTIONS)}, got {action!r}")
        limit = inputs.integer(limit, "limit", 1, MAX_BULK)
        chosen = tuple(RunState(s) for s in states) or BULK_ACTIONS[action]
        report = BulkReport(action, dry_run)
        waiting = BULK_WAITING.get(action)
        before = None
        while report.matched < limit:
            want = min(PAGE, limit - report.matched)
            page = await self.list_runs(states=chosen, task=task, queue=queue, error=error, waiting=waiting,
                                        created_after=created_after, created_before=created_before,
                                        limit=want, before_id=before)
            report.matched += len(page)
            report.sample += [run.id for run in page][:SAMPLE - len(report.sample)]
            if not dry_run:
                await each_at_once([run.id for run in page], lambda run_id: self._act(action, run_id, report))
            if progress is not None:
                progress(len(report.done) + len(report.refused), report.matched)
            if len(page) < want:
                return report
            before = page[-1].id
        more = await self.list_runs(states=chosen, task=task, queue=queue, error=error, waiting=waiting,
                                    created_after=created_after, created_before=created_before,
                                    limit=1, before_id=before)
        report.capped = bool(more)
        return report

    async def _act(self, action: str, run_id: int, report: BulkReport) -> None:
        try:
            if action == "retry":
                await self.retry(run_id)
            elif action == "resume":
                await self.resume(run_id)
            elif action == "cancel":
                await self.cancel(run_id)
            else:
                step = failing_step(await self.steps(run_id))
                fork = await self.fork(run_id, step, key=fork_key(run_id, step))
                if fork.existed:
                    report.refused[run_id] = f"ForkedAlready: run {fork.id} forks it from step {step}"
                    return
        except (RunNotFound, InvalidTransition, ThreadDeleted, InvalidInput, KeyConflict) as exc:
            report.refused[run_id] = f"{type(exc).__name__}: {exc}"
            return
        report.done.append(run_id)


def fork_key(run_id: int, step: int) -> str:
    """The key of a bulk action's fork of a run from a step: one fork of each, however many
    bulk actions reach it."""
    return f"runwright-fork:{run_id}:{step}"
