"""The violation counts, computed from the ledger (what the workers' side effects did)
and the store (what it holds). Pure functions of that data: the unit tests hand them a
crafted ledger and store records, and must see each violation counted.

- lost: a run submitted (or a child a run started) that did not end;
- failed: a run that ended neither succeeded nor cancelled (the workload cannot fail);
- steps re-executed: a journaled step whose function ran again in an attempt that came
  after the attempt whose result the journal holds (an execution before it, by a worker
  that died or stalled before its journal write, is what at-least-once allows);
- at-most-once violations: the `once` step's function ran more than once in a run;
- zombie writes: a write the store accepted from a superseded claim: a `progress` event
  carrying a fence below that of a `started` event earlier in the log (the log's order is
  the store's, so this needs no clock), or a journal record of an old fence written after
  a newer claim's `started` event (by the store's clock, with a small tolerance);
- stream faults: a run's event seqs that are not exactly 1..n, a last_seq that disagrees,
  or an ended run whose terminal event is not once and last;
- takeover time: from an attempt's last event (its last sign of life) to the `recovered`
  event that gave its run back to the queue, both by the store's clock; the wait for a
  free worker after that is the backlog's, not the takeover's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..core._journal import Event, StepRecord
from ..runs import TERMINAL_STATES, Run, RunState
from ._tasks import LEDGER_EVENT

__all__ = ["Findings", "Ledger", "RunData", "check", "children_of", "percentile", "throughput"]

CLOCK_TOLERANCE_S = 0.05  # Redis times are this machine's clock corrected to Redis's
CHILD_STEP = "submit:runwright.verify_child"


@dataclass
class Ledger:
    """The workers' side effects: step executions (run, name) -> [(fence, token)], and
    the fences of each run's `once` executions."""

    steps: dict[tuple[int, str], list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))
    once: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    _seen: set[str] = field(default_factory=set)

    def add(self, line: str) -> None:
        """One line; the same line again (an append retried after its reply was lost
        carries the same token) counts once."""
        parts = line.split()
        if line in self._seen and len(parts) in (4, 5):
            return
        self._seen.add(line)
        if len(parts) == 5 and parts[0] == "step":
            self.steps[(int(parts[1]), parts[2])].append((int(parts[3]), parts[4]))
        elif len(parts) in (3, 4) and parts[0] == "once":
            self.once[int(parts[1])].append(int(parts[2]))
        # anything else is a line a SIGKILL cut short: its effect may not have happened

    @classmethod
    def of_events(cls, events: Sequence[Event]) -> Ledger:
        """The ledger that verify --fleet's workers appended to the ledger run's log."""
        ledger = cls()
        for item in events:
            if item.kind == LEDGER_EVENT and isinstance(item.data.get("line"), str):
                ledger.add(item.data["line"])
        return ledger

    @classmethod
    def read(cls, directory: Path) -> Ledger:
        ledger = cls()
        for path in sorted(directory.glob("*.log")):
            for line in path.read_text(errors="replace").splitlines():
                ledger.add(line)
        return ledger


@dataclass
class RunData:
    """What the store holds of one run."""

    run: Run
    events: list[Event]
    steps: list[StepRecord]


@dataclass
class Findings:
    runs: int = 0  # every run checked: those submitted and their children
    finished: int = 0
    succeeded: int = 0
    cancelled: int = 0
    lost: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    steps_reexecuted: list[str] = field(default_factory=list)
    at_most_once: list[int] = field(default_factory=list)
    zombie_writes: list[str] = field(default_factory=list)
    stream_faults: list[str] = field(default_factory=list)
    takeovers_s: list[float] = field(default_factory=list)
    steps_executed: int = 0
    steps_journaled: int = 0

    def violations(self) -> dict[str, int]:
        return {"lost": len(self.lost), "failed": len(self.failed),
                "steps_reexecuted": len(self.steps_reexecuted),
                "at_most_once_violations": len(self.at_most_once),
                "zombie_writes_durable": len(self.zombie_writes),
                "stream_gaps_or_repeats": len(self.stream_faults)}

    @property
    def ok(self) -> bool:
        return not any(self.violations().values())


def children_of(data: RunData) -> list[int]:
    """The child runs that a run's journal says it started."""
    return [int(step.value()) for step in data.steps if step.name == CHILD_STEP and step.status == "done"]


def check(expected: Sequence[int], store: dict[int, RunData], ledger: Ledger) -> Findings:
    """`expected`: every run id that must have ended (submitted, and children found)."""
    found = Findings(runs=len(expected))
    for run_id in expected:
        data = store.get(run_id)
        if data is None or data.run.state not in TERMINAL_STATES:
            found.lost.append(run_id)
            if data is None:
                continue
        else:
            found.finished += 1
            if data.run.state is RunState.SUCCEEDED:
                found.succeeded += 1
            elif data.run.state is RunState.CANCELLED:
                found.cancelled += 1
            else:
                found.failed.append(run_id)
        _check_steps(data, ledger, found)
        _check_events(data, found)
    found.steps_executed = sum(len(execs) for execs in ledger.steps.values())
    return found


def _check_steps(data: RunData, ledger: Ledger, found: Findings) -> None:
    run_id = data.run.id
    for step in data.steps:
        if step.status != "done" or not isinstance(step.value(), dict) or "token" not in step.value():
            continue
        found.steps_journaled += 1
        token = step.value()["token"]
        for fence, other in ledger.steps.get((run_id, step.name), []):
            if fence > step.fence or (fence == step.fence and other != token):
                found.steps_reexecuted.append(f"run {run_id} {step.name}: ran again at fence {fence} "
                                              f"after fence {step.fence} journaled it")
    if len(ledger.once.get(run_id, [])) > 1:
        found.at_most_once.append(run_id)
    starts = [e for e in data.events if e.kind == "started"]
    for step in data.steps:
        newer = [e for e in starts if e.data.get("fence", 0) > step.fence]
        if newer and step.created_at > min(e.at for e in newer) + CLOCK_TOLERANCE_S:
            found.zombie_writes.append(f"run {run_id} journal {step.name!r} of fence {step.fence} "
                                       f"after a newer claim")


def _check_events(data: RunData, found: Findings) -> None:
    run, events = data.run, data.events
    seqs = [e.seq for e in events]
    if seqs != list(range(1, len(events) + 1)) or run.last_seq != len(events):
        found.stream_faults.append(f"run {run.id}: seqs {_summary(seqs)}, last_seq {run.last_seq}")
    elif run.state in TERMINAL_STATES:
        terminal = [e.seq for e in events if e.terminal]
        if terminal != [len(events)]:
            found.stream_faults.append(f"run {run.id}: terminal events at {terminal} of {len(events)}")
    current = 0
    for event in events:
        fence = event.data.get("fence")
        if not isinstance(fence, int):
            continue
        if event.kind == "started":
            current = max(current, fence)
        elif event.kind == "progress" and fence < current:
            found.zombie_writes.append(f"run {run.id} event {event.seq} of fence {fence} "
                                       f"after claim {current}")
    for before, event in zip(events, events[1:]):
        if event.kind == "recovered":
            found.takeovers_s.append(max(0.0, event.at - before.at))


def _summary(seqs: list[int]) -> str:
    return str(seqs) if len(seqs) <= 12 else f"[{seqs[0]}..{seqs[-1]}] ({len(seqs)})"


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile `q` (0..100) of `values`; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def throughput(runs: Sequence[Run]) -> float | None:
    """Ended runs per second, from the first submission to the last end (store times)."""
    ended = [r for r in runs if r.finished_at is not None]
    if not ended:
        return None
    span = max(r.finished_at or 0.0 for r in ended) - min(r.created_at for r in runs)
    return len(ended) / span if span > 0 else None

