"""`runwright verify`'s progress bars count the runs it submitted, as their totals say
(a phase's runs, `--runs` in all), not the child runs those start: the store's counts by
state hold the children too, and a bar fed those ran past its total."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Sequence

from rich.console import Console
from rich.progress import Progress

from runwright.runs import Run, RunState
from runwright.verify import _runner as runner

T0 = 1_000_000.0


def run(run_id: int, state: RunState, task: str = "runwright.verify_run") -> Run:
    return Run(id=run_id, key=f"k{run_id}", task=task, queue="verify", priority=2, state=state,
               args="{}", attempt=1, max_attempts=6, fence=1, run_at=T0, created_at=T0)


@dataclass
class Store:
    """A store of parents 1..10, each of which started a child 101..110, all ended; the
    reads it was asked for are kept."""

    runs: dict[int, Run] = field(default_factory=lambda: {
        **{i: run(i, RunState.SUCCEEDED) for i in range(1, 11)},
        **{100 + i: run(100 + i, RunState.SUCCEEDED, "runwright.verify_child") for i in range(1, 11)}})
    reads: list[list[int]] = field(default_factory=list)

    async def count_by_state(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for found in self.runs.values():
            counts[found.state.value] = counts.get(found.state.value, 0) + 1
        return counts

    async def read_runs(self, run_ids: Sequence[int]) -> list[Run]:
        self.reads.append(list(run_ids))
        return [self.runs[i] for i in run_ids if i in self.runs]


@dataclass
class Pool:
    procs: list[Any] = field(default_factory=list)


async def test_a_phase_bar_counts_its_submitted_runs_not_their_children() -> None:
    store = Store()
    phase = runner.Submitted()
    phase.add(list(range(1, 11)))
    with Progress(console=Console(file=io.StringIO())) as progress:
        bar = progress.add_task("baseline (no faults)", total=10)
        await runner._drain(store, Pool(), progress, bar, phase, [], timeout_s=30)  # type: ignore[arg-type]
        (task,) = progress.tasks
        assert (task.completed, task.total) == (10, 10)  # not 20 of 10, nor of 20


async def test_the_submitted_runs_are_read_again_only_when_the_store_has_moved() -> None:
    store = Store()
    store.runs[3] = run(3, RunState.RUNNING)
    phase = runner.Submitted()
    phase.add(list(range(1, 11)))
    assert await phase.ended(store, 19) == 9  # type: ignore[arg-type]
    assert await phase.ended(store, 19) == 9  # type: ignore[arg-type]
    assert store.reads == [list(range(1, 11))]  # the second look read nothing
    store.runs[3] = run(3, RunState.SUCCEEDED)
    assert await phase.ended(store, 20) == 10  # type: ignore[arg-type]
    assert store.reads[1:] == [[3]]  # only what was still open


async def test_the_checking_bar_counts_the_submitted_runs_while_reading_their_children_too(
        monkeypatch: Any) -> None:
    store = Store()

    async def read_one(_app: Any, found: Run) -> Any:
        return SimpleNamespace(run=found)

    monkeypatch.setattr(runner, "_read_one", read_one)
    monkeypatch.setattr(runner, "children_of", lambda data: [data.run.id + 100] if data.run.id <= 10 else [])
    with Progress(console=Console(file=io.StringIO())) as progress:
        read, expected = await runner._read_all(store, list(range(1, 11)), progress)  # type: ignore[arg-type]
        (task,) = progress.tasks
    assert sorted(read) == sorted(expected) == [*range(1, 11), *range(101, 111)]  # children read
    assert (task.completed, task.total) == (10, 10)
