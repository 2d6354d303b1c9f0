"""The rules of fair shares across keys (tasks._fair), decided once for every backend.

A task declared `fair=Fair(key="{tenant}")` carries its key in the run's limits text, as
one more entry `["fair/<name>", key, 1]` (PREFIX; no limit's name holds a '/'): its runs
are claimed on the limited path, where a claim reads the first due runs of each key
(limit_rules.heads), and runs without it are untouched. `limit_rules.parsed` leaves the
entry out, so it never counts as a limit.

What "fair" is: start-time fair queueing over the runs *claimed* (served), not a share of
the runs running now. Each key has a pass (its virtual time), the store's `V` is the
pass of the key served last. A claim takes, among the keys with due runs, the run of
the key whose pass (at least V) is lowest (ties: claim order of its first run), then
moves that key's pass on by 1/weight. A key that had nothing queued comes back at V, so
idle time is not saved up into a burst. A share of the runs running now (stateless)
was the other choice; it ties at zero running whenever runs are shorter than a claim
cycle, and a tie goes to the older backlog: a one-slot fleet would serve a big tenant's
100,000 runs before a small tenant's one.

Fairness orders runs of one priority: claim order stays priority first; within a
priority the keys take turns, and within a key, due time then submission. Runs without
a fair key keep their places in claim order (the fair runs are permuted among the
places the fair runs had).

The state: SQL keeps each key's pass as a row of `flow_keys` (slot PREFIX + "<name>:<key>",
`at` the pass) and V as the row of slot PREFIX alone; Redis the hash `fair`. An
operator's weight is kept as a concurrency limit's override is, under the target
PREFIX + "<name>" or PREFIX + "<name>:<key>" (a key's wins over its name's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence, TypeVar

__all__ = ["PREFIX", "VT", "FairState", "fair_slot", "is_fair", "order", "served", "weight_of", "weights_set"]

PREFIX = "fair/"
# The slot of the virtual time (V) in the store's state.
VT = PREFIX

T = TypeVar("T")


def is_fair(name: str) -> bool:
    """Whether an entry of a limits text is a fair key (not a limit)."""
    return name.startswith(PREFIX)


def fair_slot(limits: str | None) -> tuple[str, int] | None:
    """The fair slot ("fair/<name>:<key>") of a run's limits text and the weight it
    carries, or None when it has none."""
    if not limits or PREFIX not in limits:  # the common case costs no JSON decode
        return None
    for entry in json.loads(limits):
        name = str(entry[0])
        if is_fair(name):
            return f"{name}:{entry[1]}", int(entry[2])
    return None


def weights_set(overrides: Mapping[str, int]) -> dict[str, int]:
    """The weights an operator set, by "<name>" or "<name>:<key>", from the store's
    overrides (which hold the limits' maxima too, under other targets)."""
    return {target.removeprefix(PREFIX): weight for target, weight in sorted(overrides.items())
            if target.startswith(PREFIX)}


def weight_of(slot: str, declared: int, overrides: Mapping[str, int]) -> int:
    """The operator's weight of the key, else of its name, else the run's own."""
    found = overrides.get(slot)
    if found is None:
        found = overrides.get(slot.partition(":")[0])
    return declared if found is None else max(found, 1)


@dataclass(slots=True)
class FairState:
    """The passes of keys a claim reads (slot -> pass; a key missing has none yet) and
    V. `changed`: what `served` moved, for the store to write back."""

    passes: dict[str, float]
    vt: float = 0.0
    changed: dict[str, float] = field(default_factory=dict)

    def start(self, slot: str) -> float:
        """The key's pass as a claim judges it: never behind V."""
        return max(self.passes.get(slot, self.vt), self.vt)

    def serve(self, slot: str, weight: int) -> None:
        begin = self.start(slot)
        self.vt = begin
        self.passes[slot] = begin + 1.0 / weight
        self.changed[slot] = self.passes[slot]
        self.changed[VT] = begin


def slots_of(texts: Iterable[str | None]) -> list[str]:
    """The fair slots of limits texts (the keys whose passes a claim reads)."""
    out = {found[0] for found in map(fair_slot, texts) if found is not None}
    return sorted(out)


def order(candidates: Sequence[T], limits: Sequence[str | None], priorities: Sequence[int],
          state: FairState, overrides: Mapping[str, int]) -> list[T]:
    """Candidates (in claim order; their limits texts and priorities alongside) put in
    the order a claim takes them: within each priority, the places of fair runs given
    to the key with the lowest pass each time (its runs in their claim order). `state`
    is not changed (a copy is simulated): `served` records what the claim took."""
    sim = FairState(dict(state.passes), state.vt)
    out = list(candidates)
    start = 0
    while start < len(out):
        end = start
        while end < len(out) and priorities[end] == priorities[start]:
            end += 1
        places: list[int] = []
        queues: dict[str, list[int]] = {}  # slot -> its candidates' indexes, in claim order
        weights: dict[str, int] = {}
        for i in range(start, end):
            found = fair_slot(limits[i])
            if found is not None:
                places.append(i)
                queues.setdefault(found[0], []).append(i)
                weights[found[0]] = weight_of(found[0], found[1], overrides)
        if len(queues) > 1:
            heads = {slot: 0 for slot in queues}
            for place in places:
                # The key with the lowest pass; a tie goes to the one whose next run is first.
                slot = min(heads, key=lambda s: (sim.start(s), queues[s][heads[s]]))
                out[place] = candidates[queues[slot][heads[slot]]]
                sim.serve(slot, weights[slot])
                heads[slot] += 1
                if heads[slot] == len(queues[slot]):
                    del heads[slot]
        start = end
    return out


def served(taken: Iterable[str | None], state: FairState, overrides: Mapping[str, int]) -> FairState:
    """The state after a claim took runs of these limits texts, in its order: each fair
    key's pass moved on by 1/weight a run (state.changed: what to write)."""
    for limits in taken:
        found = fair_slot(limits)
        if found is not None:
            state.serve(found[0], weight_of(found[0], found[1], overrides))
    return state
