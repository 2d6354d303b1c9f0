"""A move, stop-the-world: seal the source, copy every kind in key order, leave the
source as a tombstone naming the target.

The source is written twice only (the seal, then the tombstone), so a move that failed
is abandoned by unsealing it (`abandon`). The target records how far the copy got in
itself: each kind is copied in key order, in batches that each commit, so its last key
is where an interrupted move resumes (and rows written twice are skipped, never doubled).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import InvalidInput
from ..store._moved import mark_holder, refusal_of_mark, refusal_text
from ._ends import End, open_end, refuse_kind, seconds
from ._kinds import KINDS, Kind, given_back
from ._redis_end import RedisEnd

__all__ = ["Difference", "KindCount", "MoveReport", "abandon", "check", "move", "plan"]

BATCH = 2000
# The rate a seal's "retry in N s" is reckoned at before the copy measured one: below
# what a busy 2-core machine copies (the slowest kind, runs, at 50,000 rows/s: benchmarks/move.py).
ASSUMED_ROWS_PER_S = 20_000.0

Progress = Callable[[Kind, int, int], None]  # the kind, rows copied so far, rows it has


@dataclass(frozen=True, slots=True)
class KindCount:
    table: str
    what: str
    rows: int
    seconds: float = 0.0  # the copy's (0 in a plan)


@dataclass(slots=True)
class MoveReport:
    source: str
    target: str
    kinds: list[KindCount] = field(default_factory=list)
    resumed: bool = False
    sealed_s: float = 0.0  # from the seal to the tombstone
    retry_s: int = 0  # what refused writers were told to wait

    @property
    def rows(self) -> int:
        return sum(kind.rows for kind in self.kinds)


@dataclass(frozen=True, slots=True)
class Difference:
    table: str
    source_rows: int
    target_rows: int
    source_sum: str
    target_sum: str


async def _ends(source_url: str, target_url: str | None) -> tuple[End, End | None]:
    if target_url is not None and source_url == target_url:
        raise InvalidInput("--to names the store this deployment is on already")
    source = await open_end(source_url)
    try:
        target = await open_end(target_url, target=True) if target_url is not None else None
        # The same database under another spelling (a relative path, another host name):
        # a move into itself would seal it and leave it its own tombstone.
        if target is not None and await target.identity() == await source.identity():
            await target.close()
            raise InvalidInput(f"--to {target.shown} is the store this deployment is on already")
    except BaseException:
        await source.close()
        raise
    return source, target


async def _shared_kinds(source: End, target: End) -> list[tuple[Kind, list[str]]]:
    """Each kind both ends have, with the columns both have (PostgreSQL's `lingering`
    holds nothing once a run is given back; see given_back)."""
    source_tables, target_tables = await source.tables(), await target.tables()
    found = []
    for kind in KINDS:
        if kind.table in source_tables and kind.table in target_tables:
            theirs = set(await target.columns(kind.table))
            found.append((kind, [c for c in await source.columns(kind.table) if c in theirs]))
    return found


async def _migrate(url: str) -> None:
    """The target's schema, by its own store (the same migrations as any start)."""
    from ..store._urls import store_from_url

    store = store_from_url(url)
    store.heed_moves = False  # type: ignore[attr-defined]  # a receiving target is ours to write
    await store.open(create=True)
    try:
        await store.migrate()
    finally:
        await store.close()


async def _require_current(url: str) -> None:
    from ..store._urls import store_from_url

    store = store_from_url(url)
    store.heed_moves = False  # type: ignore[attr-defined]
    await store.open(create=False)
    try:
        await store.require_schema()
    finally:
        await store.close()


async def move(source_url: str, target_url: str, *, progress: Progress | None = None,
               batch: int = BATCH) -> MoveReport:
    """Move the deployment on `source_url` to `target_url` (an empty store, or the one
    an interrupted move into it left): seal, copy, tombstone. Raises DeploymentMoved
    when the source is moving elsewhere or moved already."""
    refuse_kind(source_url)  # before anything is opened: one line each
    refuse_kind(target_url, target=True)
    await _require_current(source_url)
    source, target = await _ends(source_url, target_url)
    assert target is not None
    try:
        return await _move(source, target, progress, batch)
    finally:
        await source.close()
        await target.close()


async def _move(source: End, target: End, progress: Progress | None, batch: int) -> MoveReport:
    report = MoveReport(source.shown, target.shown)
    mark = await source.read_mark()
    if mark is not None:
        said = json.loads(mark)
        if said["state"] != "moving" or said["target"] != target.shown:
            moved = refusal_of_mark(mark)
            assert moved is not None
            if said["state"] == "moved" and said["target"] == target.shown:
                await _finish_target(target, source)  # killed between the tombstone and the last write
            raise moved
        if json.loads(await target.read_mark() or "{}").get("target") != source.shown:
            raise InvalidInput(f"{source.shown} is sealed for a move to {target.shown}, which holds no copy"
                               f" in progress from it: run `runwright move --abandon` on the source first")
        report.resumed = True
        report.retry_s = int(said.get("retry_s", 0))
    else:
        await _migrate(target.url)
        await _refuse_unless_empty(target, source)
        await _refuse_unkept(source, target)
        counts = {kind.table: await source.count(kind.table) for kind in KINDS
                  if kind.table in await source.tables()}
        report.retry_s = seconds(sum(counts.values()), ASSUMED_ROWS_PER_S) + 5
        await target.write_mark(mark_holder("receiving", source.shown))
        await source.seal(mark_holder("moving", target.shown, report.retry_s),
                          refusal_text("moving", target.shown, report.retry_s))
    sealed_at = time.monotonic()
    for kind, columns in await _shared_kinds(source, target):
        report.kinds.append(await _copy(source, target, kind, columns, progress, batch))
    # The ids the target gives next follow the source's (a run id is never given twice).
    for table in ("runs", "workers"):
        await target.ensure_next_id(table, await source.next_id(table))
    if "run_keys" not in await source.tables():
        await target.run_keys_from_runs()
    await source.seal(mark_holder("moved", target.shown), refusal_text("moved", target.shown))
    report.sealed_s = time.monotonic() - sealed_at
    await _finish_target(target, source)
    return report


async def _finish_target(target: End, source: End) -> None:
    if json.loads(await target.read_mark() or "{}").get("target") == source.shown:
        await target.write_mark(None)


async def _refuse_unkept(source: End, target: End) -> None:
    """Before the seal: a kind the source holds that the target keeps nowhere (a Redis
    target does not take them all yet) refuses the move, rather than leave it behind.
    PostgreSQL's run_keys is made again on a SQLite target from its runs."""
    theirs = await target.tables()
    lost = [kind.table for kind in KINDS if kind.table in await source.tables() and kind.table not in theirs
            and kind.table != "run_keys" and await source.count(kind.table)]
    if lost:
        raise InvalidInput(f"{target.shown} cannot take {', '.join(lost)} yet (a move to Redis carries runs,"
                           f" journals, event logs, questions, schedules, retention's marks, rate buckets,"
                           f" paused queues and limit overrides so far):"
                           f" nothing was moved")


async def _refuse_unless_empty(target: End, source: End) -> None:
    mark = await target.read_mark()
    if mark is not None:
        raise InvalidInput(f"{target.shown} holds part of an abandoned move from"
                           f" {json.loads(mark)['target']}: move to an empty store (drop that one first)")
    tables = await target.tables()
    held = [kind.table for kind in KINDS if kind.table in tables and await target.count(kind.table)]
    if not held and isinstance(target, RedisEnd):
        stray = await target.stray()
        held = [f"keys {', '.join(stray)}"] if stray else []
    if held:
        raise InvalidInput(f"{target.shown} is not empty (it holds {', '.join(held)}):"
                           f" a move goes to an empty store")


async def _copy(source: End, target: End, kind: Kind, columns: list[str], progress: Progress | None,
                batch: int) -> KindCount:
    started = time.monotonic()
    total = await source.count(kind.table)
    after = await target.last_key(kind.table, kind.key)
    done = await target.count(kind.table)
    places = [columns.index(k) for k in kind.key]
    if progress is not None:
        progress(kind, done, total)
    while True:
        rows = await source.rows(kind.table, columns, kind.key, after, batch)
        if not rows:
            break
        if kind.table == "runs":
            rows = [given_back(columns, row) for row in rows]
        await target.insert(kind.table, columns, rows)
        after = [rows[-1][i] for i in places]
        done += len(rows)
        if progress is not None:
            progress(kind, min(done, total), total)
    return KindCount(kind.table, kind.what, total, time.monotonic() - started)


async def abandon(source_url: str) -> str:
    """Unseal a source whose move failed or was given up: it takes writes again. Refused
    once it moved (the target may have taken writes since: unsealing would split the
    deployment in two). The target named, which holds a partial copy to drop."""
    source, _ = await _ends(source_url, None)
    try:
        mark = await source.read_mark()
        if mark is None:
            raise InvalidInput(f"{source.shown} is not sealed by a move: nothing to abandon")
        said = json.loads(mark)
        if said["state"] != "moving":
            raise InvalidInput(f"{source.shown} moved to {said['target']} already: the target may have taken"
                               f" writes since, so the source stays its tombstone")
        await source.unseal()
        return str(said["target"])
    finally:
        await source.close()


async def check(source_url: str, target_url: str) -> list[Difference]:
    """Each kind's rows and checksum on both ends; the kinds that differ. A run running
    at the seal is compared as it was given back (see given_back)."""
    source, target = await _ends(source_url, target_url)
    assert target is not None
    try:
        differences = []
        for kind, columns in await _shared_kinds(source, target):
            mine = await _summed(source, kind, columns, give_back=True)
            theirs = await _summed(target, kind, columns, give_back=False)
            if mine != theirs:
                differences.append(Difference(kind.table, mine[0], theirs[0], mine[1], theirs[1]))
        return differences
    finally:
        await source.close()
        await target.close()


async def _summed(end: End, kind: Kind, columns: list[str], give_back: bool) -> tuple[int, str]:
    digest = hashlib.sha256()
    count = 0
    after = None
    places = [columns.index(k) for k in kind.key]
    while True:
        rows = await end.rows(kind.table, columns, kind.key, after, BATCH)
        if not rows:
            return count, digest.hexdigest()[:16]
        for row in rows:
            if give_back:
                row = given_back(columns, row) if kind.table == "runs" else row
            digest.update(json.dumps([_plain(value) for value in row]).encode())
            count += 1
        after = [rows[-1][i] for i in places]


def _plain(value: Any) -> Any:
    """One value as both ends hold it: SQLite's 0/1 is PostgreSQL's boolean, its integral
    REAL an integer."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() else repr(value)
    return value


async def plan(source_url: str, target_url: str | None = None) -> tuple[list[KindCount], float]:
    """What a move would carry (rows per kind), and the rows per second this machine
    read and wrote copying a sample of runs and events into a scratch SQLite file."""
    if target_url is not None:
        refuse_kind(target_url, target=True)
    source, _ = await _ends(source_url, None)
    try:
        tables = await source.tables()
        counts = [KindCount(kind.table, kind.what, await source.count(kind.table))
                  for kind in KINDS if kind.table in tables]
        return counts, await _sample_rate(source)
    finally:
        await source.close()


async def _sample_rate(source: End) -> float:
    import tempfile

    from ._ends import SqliteEnd

    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{scratch}/sample.db"
        await _migrate(url)
        sample = SqliteEnd(url, f"{scratch}/sample.db")
        try:
            copied, started = 0, time.monotonic()
            for kind in KINDS[:3]:  # runs, steps, events: most of any deployment
                theirs = set(await sample.columns(kind.table))
                columns = [c for c in await source.columns(kind.table) if c in theirs]
                rows = await source.rows(kind.table, columns, kind.key, None, 5000)
                if rows:
                    await sample.insert(kind.table, columns, rows)
                copied += len(rows)
            elapsed = time.monotonic() - started
        finally:
            await sample.close()
    if copied == 0:
        return ASSUMED_ROWS_PER_S
    return copied / max(elapsed, 1e-3)

