"""The rules of concurrency limits per key (tasks._concurrency), decided once for every
backend: which due runs a limited claim may take, and what a key's max is.

A backend reads, under its lock (SQLite's write lock, PostgreSQL's advisory lock of the
limited claim, a Redis script), the limits of the runs RUNNING now and the due runs of
limited tasks in claim order, asks `pick`, and claims what it answers in the same write.
Nothing is counted apart from the runs' states: a run's slot is taken when it becomes
running and given back when it stops being running, whatever made it stop (an end, a
give-back, a takeover of a dead worker's run), so a slot is never leaked nor counted twice.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping, Protocol

from ._fair_rules import is_fair
from ._params import LimitUse

__all__ = ["TEXTS_CAP", "effective_max", "full", "heads", "held_by", "parsed", "pick", "running_by_slot",
           "slot", "uses"]


class _Rates(Protocol):
    """store._rate_rules.Book, as pick asks it (that module imports this one)."""

    def take(self, run_id: int, limits: str | None) -> bool: ...


def slot(name: str, key: str) -> str:
    """What runs are counted under: one key of one limit (as tasks._concurrency.slot_of)."""
    return f"{name}:{key}"


def parsed(limits: str | None) -> list[tuple[str, str, int]]:
    """A limits text's concurrency limits: its rates (five fields, store._rate_rules) are not."""
    if not limits:
        return []
    # A fair key rides in the text too (store._fair_rules): it is no limit either.
    return [(str(e[0]), str(e[1]), int(e[2])) for e in json.loads(limits)
            if len(e) == 3 and not is_fair(str(e[0]))]


def effective_max(name: str, key: str, declared: int, overrides: Mapping[str, int]) -> int:
    """An override of the key wins over one of its limit's name, which wins over the max
    the run carries (its task's declaration at its submission)."""
    found = overrides.get(slot(name, key))
    if found is None:
        found = overrides.get(name)
    return declared if found is None else found


def running_by_slot(running: Iterable[str | None]) -> dict[str, int]:
    """How many runs run under each slot, from the limits of the runs running now."""
    counts: dict[str, int] = {}
    for limits in running:
        for name, key, _ in parsed(limits):
            s = slot(name, key)
            counts[s] = counts.get(s, 0) + 1
    return counts


def pick(candidates: Iterable[tuple[int, str | None]], running: dict[str, int],
         overrides: Mapping[str, int], want: int, held: set[str] | None = None,
         rates: _Rates | None = None) -> list[int]:
    """Of due runs (id, limits) in claim order, those a claim takes: each while every one
    of its limits has room, counting those taken before it (`running` is updated). A run
    held back does not hold back the runs behind it of other keys. A run of a limited
    task that carries no limits (submitted before its task declared any) is not held.

    `held` (updated): limits texts known to be held back. Runs of one key carry one text,
    and a claim's counts only grow, so a text held once stays held for the rest of the
    claim: a backlog of one full key costs a set lookup a run, not a JSON decode, and a
    store may leave those runs out of its walk (see `full`).

    `rates` (store._rate_rules.Book): asked last, for a run its concurrency limits let
    start, so a run held by either spends nothing; a claim's budgets only shrink, so a
    text held by its rate stays held too."""
    taken: list[int] = []
    if want <= 0:
        return taken
    if held is None:
        held = set()
    for run_id, limits in candidates:
        if limits is not None and limits in held:
            continue
        mine = parsed(limits)
        if (all(running.get(slot(n, k), 0) < effective_max(n, k, m, overrides) for n, k, m in mine)
                and (rates is None or rates.take(run_id, limits))):
            for n, k, _ in mine:
                s = slot(n, k)
                running[s] = running.get(s, 0) + 1
            taken.append(run_id)
            if len(taken) >= want:
                break
        elif limits is not None:
            held.add(limits)
    return taken


def full(texts: Iterable[str | None], running: Mapping[str, int], overrides: Mapping[str, int]) -> set[str]:
    """Of limits texts (those of the runs running now), the ones a claim would hold back
    now: a key's queued runs carry the text of its running ones (the same task's
    declaration), so a walk of the due runs can leave them out from its first row."""
    out: set[str] = set()
    for text in texts:
        if text is None or text in out:
            continue
        if any(running.get(slot(n, k), 0) >= effective_max(n, k, m, overrides) for n, k, m in parsed(text)):
            out.add(text)
    return out


# A limited claim that holds keys back reads the distinct limits texts of the queued runs
# (one index probe each), up to this many, to read the head runs of each text with room
# (`heads`) instead of walking every due run in claim order: a backlog of 20,000 runs of
# one full key made each claim step over all of them (O(backlog) a claim, under the
# claim's lock), and a small tenant's run waited 25x longer than alone. With more texts
# than this the walk is the cheaper read (each held text's backlog is short), and is kept.
TEXTS_CAP = 256


def heads(texts: Iterable[str], held: set[str], running: Mapping[str, int],
          overrides: Mapping[str, int], want: int) -> list[tuple[str, int]]:
    """Of the limits texts of queued runs, those a claim reads the first runs of, each
    with how many: as many as its keys have room for (never more than `want`). Merged in
    claim order, they are every run the walk in claim order could take: a text's runs
    after its first `room` could not be taken by this claim whatever came before them."""
    out = []
    for text in texts:
        if text in held:
            continue
        mine = parsed(text)
        room = min((effective_max(n, k, m, overrides) - running.get(slot(n, k), 0) for n, k, m in mine),
                   default=want)
        if room > 0:
            out.append((text, min(room, want)))
    return out


def held_by(limits: str | None, running: Mapping[str, int],
            overrides: Mapping[str, int]) -> list[tuple[str, str, int, int]]:
    """The limits of a queued run that hold it back now: (name, key, running, max)."""
    out = []
    for n, k, m in parsed(limits):
        cap = effective_max(n, k, m, overrides)
        used = running.get(slot(n, k), 0)
        if used >= cap:
            out.append((n, k, used, cap))
    return out


def uses(running: Iterable[str | None], queued: Iterable[str | None],
         overrides: Mapping[str, int]) -> list[LimitUse]:
    """Every key with a run running or queued under it, with the max a claim applies."""
    seen: dict[tuple[str, str], list[int]] = {}  # -> [declared max, running, queued]
    for limits in running:
        for n, k, m in parsed(limits):
            seen.setdefault((n, k), [m, 0, 0])[1] += 1
    for limits in queued:
        for n, k, m in parsed(limits):
            seen.setdefault((n, k), [m, 0, 0])[2] += 1
    out = []
    for (n, k), (m, r, q) in sorted(seen.items()):
        cap = effective_max(n, k, m, overrides)
        out.append(LimitUse(n, k, cap, r, q, slot(n, k) in overrides or n in overrides))
    # An override with no run under it yet is shown too (key "" for a limit's every key).
    shown = {slot(use.name, use.key) for use in out} | {use.name for use in out}
    for target, cap in sorted(overrides.items()):
        if target not in shown and not is_fair(target):  # a weight (store._fair_rules)
            name, _, key = target.partition(":")
            out.append(LimitUse(name, key, cap, 0, 0, True))
    return out
