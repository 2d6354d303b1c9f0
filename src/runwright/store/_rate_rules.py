"""The rules of rates per key (tasks._rates), decided once for every backend: whether a
limited claim may start a run under its rates now, and what that start spends.

A rate lives in a run's limits text as `[name, key, max, per_s, cost]`. Its key's budget
is a log of spends: one entry a start, (until, cost, run id), `until` being the start's
time plus `per_s`. A run may start at `now` while the costs of its key's entries with
`until > now`, plus its own cost, stay within the key's max (an override's, as for a
concurrency limit: limit_rules.effective_max): in any window of `per_s` seconds, at most
`max` is started. The claim reads the log under its lock (SQLite's write lock,
PostgreSQL's advisory lock of the limited claim, the Redis claim script), asks `Book.take`
through limit_rules.pick, and writes the spends of the runs it claimed in the same write:
two claimers never both spend the last of a window.

A spend is never given back: a run that starts and then fails, is cancelled, or whose
worker dies (a takeover queues it again) used its start; its next start spends again.
"""

from __future__ import annotations

import json
from typing import Callable, Iterable, Mapping

from ._limit_rules import effective_max, slot
from ._params import LimitUse

__all__ = ["PRUNE_AFTER_S", "Book", "merged", "next_at", "rates_in", "spent_now", "uses"]

# How long past its window's end a spend is kept before a claim deletes it. Claims are
# not judged in the order of their times (a claim reads its time, then waits for the lock
# another claim with a later time holds): one that deleted every spend ended by its own
# time would take from a later claim with an earlier time a spend whose window still
# holds that time. Counting is safe either way (each claim counts every spend whose window
# holds its time, whichever committed first); deleting must trail.
PRUNE_AFTER_S = 60.0

# (until, cost) of one spend of a key's budget.
Spend = tuple[float, float]


def rates_in(limits: str | None) -> list[tuple[str, str, int, float, float]]:
    """A limits text's rates as (name, key, max, per_s, cost) (its concurrency limits,
    [name, key, max], left out)."""
    if not limits:
        return []
    return [(str(e[0]), str(e[1]), int(e[2]), float(e[3]), float(e[4]))
            for e in json.loads(limits) if len(e) == 5]


def spent_now(spends: Iterable[Spend], now: float) -> float:
    """The cost a key's window holds at `now`: its spends whose window has not passed."""
    return sum(cost for until, cost in spends if until > now)


def next_at(spends: Iterable[Spend], cap: float, cost: float, now: float) -> float | None:
    """When a run of `cost` may start under a key whose log is `spends` and whose max is
    `cap`: `now` when it fits, else the end of the window of the spend whose expiry makes
    room; None when it never can while the max is `cap` (its cost is over it)."""
    if cost > cap:
        return None
    live = sorted((until, c) for until, c in spends if until > now)
    total = sum(c for _, c in live)
    if total + cost <= cap:
        return now
    for until, c in live:
        total -= c
        if total + cost <= cap:
            return until
    return None  # unreachable: an empty window holds `cost` <= cap


class Book:
    """One claim's view of the rates it may start runs under: the logs of the keys it met
    (read through `load`, once a key), what it spent, and for which run.

    `load(slots)`: the live spends of those slots (a dict of lists); a backend that reads
    asynchronously loads them first (`missing`, then `add`) and gives no loader."""

    def __init__(self, now: float, overrides: Mapping[str, int],
                 load: Callable[[list[str]], dict[str, list[Spend]]] | None = None) -> None:
        self.now = now
        self.overrides = overrides
        self._load = load
        self.logs: dict[str, list[Spend]] = {}
        self._rates: dict[str, list[tuple[str, str, int, float, float]]] = {}  # by text: decoded once
        # run id -> its spends, (slot, until, cost): what the claim writes for the runs it took.
        self.spends: dict[int, list[tuple[str, float, float]]] = {}
        self.blocked: set[str] = set()  # keys a run of which was held back in this claim

    def _of(self, limits: str | None) -> list[tuple[str, str, int, float, float]]:
        if limits is None:
            return []
        mine = self._rates.get(limits)
        if mine is None:
            mine = self._rates[limits] = rates_in(limits)
        return mine

    def missing(self, texts: Iterable[str | None]) -> list[str]:
        """The slots of rates in `texts` whose logs the book has not read yet."""
        out = []
        for text in set(texts):
            for name, key, *_ in self._of(text):
                s = slot(name, key)
                if s not in self.logs and s not in out:
                    out.append(s)
        return out

    def add(self, logs: Mapping[str, list[Spend]], slots: Iterable[str]) -> None:
        """What a backend read for `slots` (a slot with no spends: absent from `logs`)."""
        for s in slots:
            self.logs[s] = list(logs.get(s, ()))

    def take(self, run_id: int, limits: str | None) -> bool:
        """limit_rules.pick's question: may the run start now under its rates? When it
        may, its spends are counted (a later run of the claim sees them) and kept for the
        claim's write."""
        mine = self._of(limits)
        if not mine:
            return True
        if self._load is not None:
            wanted = self.missing([limits])
            if wanted:
                self.add(self._load(wanted), wanted)
        if any(slot(name, key) in self.blocked for name, key, *_ in mine):
            return False
        for name, key, declared, _per_s, cost in mine:
            cap = effective_max(name, key, declared, self.overrides)
            if spent_now(self.logs.get(slot(name, key), ()), self.now) + cost > cap:
                # The key's runs start in their order: a cheaper run behind this one does
                # not take the room it waits for (it would wait for ever behind a stream
                # of small ones). Its other keys, which had room, hold nothing back.
                self.blocked.add(slot(name, key))
                return False
        made = []
        for name, key, _declared, per_s, cost in mine:
            s = slot(name, key)
            spend = (self.now + per_s, cost)
            self.logs.setdefault(s, []).append(spend)
            made.append((s, *spend))
        self.spends[run_id] = made
        return True

    def written(self, claimed: Iterable[int]) -> list[tuple[str, float, float, int]]:
        """The spends to write for the runs the claim took: (slot, until, cost, run id)."""
        return [(s, until, cost, run_id)
                for run_id in claimed for s, until, cost in self.spends.get(run_id, ())]


def uses(running: Iterable[str | None], queued: Iterable[str | None], overrides: Mapping[str, int],
         logs: Mapping[str, list[Spend]], now: float) -> list[LimitUse]:
    """Every key of a rate with a run running or queued under it: its runs, its max, what
    its window holds now (`spent`) and its live spends (`spends`, for when a queued run
    may start)."""
    seen: dict[tuple[str, str], list[float]] = {}  # -> [declared max, per_s, running, queued]
    for texts, at in ((running, 2), (queued, 3)):
        for limits in texts:
            for n, k, declared, per_s, _ in rates_in(limits):
                seen.setdefault((n, k), [declared, per_s, 0, 0])[at] += 1
    out = []
    for (n, k), (m, window, r, q) in sorted(seen.items()):
        s = slot(n, k)
        live = tuple(sorted((until, cost) for until, cost in logs.get(s, ()) if until > now))
        out.append(LimitUse(n, k, effective_max(n, k, int(m), overrides), int(r), int(q),
                            s in overrides or n in overrides, per_s=window,
                            spent=sum(cost for _, cost in live), spends=live))
    return out


def merged(limits: list[LimitUse], rates: list[LimitUse]) -> list[LimitUse]:
    """The uses of concurrency limits (limit_rules.uses) and of rates, one list: an
    override that limit_rules.uses showed alone (no run of a concurrency limit under it)
    is left out when it is a rate's."""
    named = {use.name for use in rates} | {slot(use.name, use.key) for use in rates}
    kept = [use for use in limits
            if not (use.overridden and use.running == 0 and use.queued == 0
                    and (slot(use.name, use.key) if use.key else use.name) in named)]
    return kept + rates
