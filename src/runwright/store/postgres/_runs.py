"""The PostgreSQL store's hot path of runs: submit, claim, extend and finish, one round trip
each."""

from __future__ import annotations

import asyncio
import itertools
import json
import operator
from typing import Any, Iterable, Iterator, Sequence

import asyncpg

from ...errors import InvalidInput
from ...runs import Run
from .. import _fair_rules as fair_rules
from .. import _limit_rules as limit_rules
from .. import _rate_rules as rate_rules
from .. import _rules as rules
from .._flow_rules import has_flow, refuse_flow_in
from .._hub import QUEUED
from .._params import RunClaimParams, RunExtendParams, RunExtendResult, RunFinishParams, RunInsertParams
from ..sql import _statements as q
from ..sql._columns import run_from_row
from ..sql._flow import SqlFlow
from . import _sql as sql
from ._base import LIMITED_KEY, PostgresBase
from ._foreign import caller_connection

__all__ = ["PostgresRuns"]

# Runs per statement when a batch is sent in chunks (_insert_pipelined).
INSERT_CHUNK = 200


class PostgresRuns(PostgresBase, SqlFlow):
    """The hot path of runs (`RunStore`; the rest is `..sql.runs`)."""

    # -- the hot path ---------------------------------------------------------------

    async def run_insert_many(self, params: Iterable[RunInsertParams]) -> list[Run]:
        items = iter(params)  # pulling an item checks it (see scope)
        first = list(itertools.islice(items, INSERT_CHUNK))
        if not first:
            return []
        if has_flow(first):  # opt-in: decided under its keys' locks (sql._flow)
            return await self._insert_flowed([*first, *items])
        now = self.clock.now(first[0].now)
        # One item past the first chunk says whether there are more: the server gets the
        # first chunk before the second is pulled (checking a chunk of submit_many's items
        # took 0.8-1.5 ms, which the server spent waiting when both were pulled first).
        after = next(items, None)
        async with self._conn() as conn:
            if after is None and rules.fenced_parents(first):
                async with conn.transaction():  # the parents' check holds to the commit
                    await self._check_parents(conn, first)
                    runs = await self._insert(conn, first, now)
            elif after is None:
                # No BEGIN/COMMIT around it (two round trips of three): the insert is one
                # statement, atomic by itself, and the read of keys that already existed
                # would see a snapshot of its own under READ COMMITTED inside a
                # transaction too.
                runs = await self._insert(conn, first, now, fresh=all(p.key_is_fresh for p in first))
            else:
                rest = _chunks(itertools.chain((after,), items), INSERT_CHUNK)
                runs = await self._insert_pipelined(conn, itertools.chain((first,), rest), now)
        self.hub.fire(QUEUED)
        return runs

    async def run_insert_in(self, connection: Any, params: Sequence[RunInsertParams]) -> list[Run]:
        """In the caller's transaction: the insert's NOTIFY is sent at its commit, so no
        worker looks for the runs before they exist (nor ever, if it rolls back)."""
        refuse_flow_in(params)
        conn = caller_connection(connection)
        if not params:
            return []
        now = self.clock.now(params[0].now)
        try:
            await self._check_parents(conn, params)
            return await self._insert(conn, params, now)
        except Exception as exc:
            if type(exc).__name__ not in ("UndefinedTableError", "UndefinedTable"):  # asyncpg's, psycopg's
                raise
            raise InvalidInput(f"connection= reaches no runwright schema {self.schema!r}: it must be a "
                               f"connection to the store's database") from None

    async def _insert(self, conn: asyncpg.Connection, params: Sequence[RunInsertParams],
                      now: float, fresh: bool = False) -> list[Run]:
        """`fresh`: every key was made for this submission (outside a transaction only: a
        collision fails the statement, and it is retried checking keys)."""
        rows, channel = None, self.channels["queued"]
        if fresh:
            try:
                if len(params) == 1:  # a submit: its values as parameters (see sql.INSERT_ONE)
                    statement, values = sql.INSERT_ONE, _insert_row(params[0], now)
                else:
                    statement, values = _fresh_insert(params, now)
                statement = sql.for_batch(statement, (p.parent_id for p in params))
                rows = await conn.fetch(self._sql(statement), *values, now, channel)
            except asyncpg.UniqueViolationError:
                pass  # a retry of an insert that committed: its runs are read below
        if rows is None:
            statement = sql.for_batch(sql.INSERT_MANY, (p.parent_id for p in params))
            rows = await conn.fetch(self._sql(statement), _insert_rows(params, now), now, channel)
        return await self._with_existing(conn, params, _made(params, rows, now))

    async def _check_parents(self, conn: asyncpg.Connection, params: Sequence[RunInsertParams]) -> None:
        """rules.check_parents_fenced, inside the insert's transaction: the parents are read
        FOR SHARE, so no takeover (a new fence), end or removal of one comes before the
        insert commits."""
        fenced = rules.fenced_parents(params)
        if fenced:
            rows = await conn.fetch(self._sql(sql.RUNNING_AT), [parent_id for parent_id, _ in fenced])
            rules.check_parents_fenced(fenced, {row[0]: row[1] for row in rows})

    async def _insert_pipelined(self, conn: asyncpg.Connection, chunks: Iterable[Sequence[RunInsertParams]],
                                now: float) -> list[Run]:
        """A large batch in one transaction, a statement per chunk, each sent before the
        next chunk is pulled: the submitter checks and encodes chunk n+1 (about as long
        as the server takes to insert one) while the server inserts chunk n. An error
        pulling a chunk (a bad item) rolls back what was sent: nothing is written. A fresh
        chunk that collides (a retried insert) aborts the transaction, and the whole batch
        is then inserted again checking keys."""
        taken: list[RunInsertParams] = []
        try:
            async with conn.transaction():
                return await self._send_chunks(conn, chunks, now, taken)
        except asyncpg.UniqueViolationError:
            pass  # rolled back whole
        taken += [p for chunk in chunks for p in chunk]
        async with conn.transaction():
            await self._check_parents(conn, taken)
            return await self._insert(conn, taken, now)

    async def _send_chunks(self, conn: asyncpg.Connection, chunks: Iterable[Sequence[RunInsertParams]],
                           now: float, taken: list[RunInsertParams]) -> list[Run]:
        """_insert_pipelined's loop; `taken` gathers the items pulled."""
        made: dict[tuple[str, str], Run] = {}
        sending: asyncio.Future[list[asyncpg.Record]] | None = None
        sent: Sequence[RunInsertParams] = ()  # the chunk `sending` inserts
        try:
            for chunk in chunks:
                taken += chunk
                if rules.fenced_parents(chunk):  # checked alone: one statement at a time
                    if sending is not None:
                        made.update(_made(sent, await sending, now))
                        sending = None
                    await self._check_parents(conn, chunk)
                if all(p.key_is_fresh for p in chunk):
                    statement, values = _fresh_insert(chunk, now)
                else:
                    statement, values = sql.INSERT_MANY, (_insert_rows(chunk, now),)
                statement = sql.for_batch(statement, (p.parent_id for p in chunk))
                args = (self._sql(statement), *values, now, self.channels["queued"])
                if sending is not None:
                    made.update(_made(sent, await sending, now))
                sending, sent = asyncio.ensure_future(conn.fetch(*args)), chunk
                await asyncio.sleep(0)  # it is sent before the next chunk is pulled
            if sending is not None:
                made.update(_made(sent, await sending, now))
            return await self._with_existing(conn, taken, made)
        finally:
            if sending is not None and not sending.done():
                # The transaction ends only once its session is idle again.
                await asyncio.gather(sending, return_exceptions=True)

    async def _with_existing(self, conn: asyncpg.Connection, params: Sequence[RunInsertParams],
                             found: dict[tuple[str, str], Run]) -> list[Run]:
        """The runs an insert made (`found`, by tenant and key) and, read here, those whose
        key already named one, in the caller's order."""
        missing: dict[str, list[str]] = {}
        for p in params:
            if (p.tenant or "", p.key) not in found:
                missing.setdefault(p.tenant or "", []).append(p.key)
        for tenant, keys in missing.items():
            for row in await conn.fetch(self._sql(sql.GET_BY_KEYS), tenant, keys):
                run = run_from_row(row)
                run.existed = True
                found[tenant, run.key] = run
        return _in_order(params, found)

    async def run_claim(self, params: RunClaimParams) -> list[Run]:
        # On the store's pool, not the claiming one: an idle worker claims once a poll,
        # which would keep a claiming session open for ever beside the pool's kept one
        # (README, "Sessions"); in a burst, claims go with the finishes (run_finish_claim),
        # on the claiming pool.
        async with self._conn() as conn:
            rows = await conn.fetch(self._sql(sql.CLAIM), *self._claim_args(params))
        runs = _claimed(rows)
        if params.limited and len(runs) < params.limit:
            runs += await self._claim_limited(params, params.limit - len(runs))
        return runs

    async def _claim_limited(self, params: RunClaimParams, want: int) -> list[Run]:
        """Runs that carry concurrency limits, as limit_rules.pick allows, under the
        limited claim's lock (see sql.LIMITED_LOCK). Only for a claim that names limited
        tasks: a worker with none never comes here."""
        now = self.clock.judged(params.now)
        keys = None if params.majors is None else rules.claim_keys(params.majors)
        async with self._conn() as conn:
            if await conn.fetchval(self._sql(sql.LIMITED_ANY), list(params.queues), list(params.limited),
                                   now) is None:
                return []
        async with self._conn() as conn, conn.transaction():
            await conn.execute(self._sql(sql.LIMITED_LOCK), self.lock_namespace, LIMITED_KEY)
            texts = [row[0] for row in await conn.fetch(self._sql(q.LIMITED_RUNNING))]
            running = limit_rules.running_by_slot(texts)
            overrides = {row[0]: int(row[1]) for row in await conn.fetch(self._sql(q.LIMIT_OVERRIDES))}
            # The keys full now are left out of the walk by the database, and those found
            # full on a page from the next page on: a backlog of one full key is not read
            # page after page, under the lock, before the runs of other keys behind it.
            held = limit_rules.full(texts, running, overrides)
            book = _Book(now, overrides)
            args = (list(params.queues), list(params.limited), now, keys, params.fleet)
            heads = None
            # The heads of each key's runs, where a walk would step over backlogs; a fair
            # claim needs each key's first runs to take them in turns (store._fair_rules).
            if held or params.fair:
                queued = [row[0] for row in await conn.fetch(self._sql(sql.LIMITED_TEXTS),
                                                             limit_rules.TEXTS_CAP)]
                if len(queued) < limit_rules.TEXTS_CAP:
                    heads = limit_rules.heads(queued, held, running, overrides, want)
            picked: list[int] = []
            if heads is not None:
                if heads:
                    rows = await conn.fetch(self._sql(sql.LIMITED_HEADS), *args, [text for text, _ in heads],
                                            [n for _, n in heads])
                    candidates = [(row[0], row[3]) for row in rows]
                    fair = None
                    if params.fair:  # the fair runs' places given to their keys in turns
                        fair = await self._fair_state(conn, [row[3] for row in rows])
                        candidates = fair_rules.order(candidates, [row[3] for row in rows],
                                                      [row[1] for row in rows], fair, overrides)
                    await book.read(conn, self._sql, (row[3] for row in rows))
                    picked = limit_rules.pick(candidates, running, overrides, want, held, book)
                    if fair is not None:
                        texts_of = dict(candidates)
                        changed = fair_rules.served((texts_of[i] for i in picked), fair, overrides).changed
                        if changed:
                            await conn.execute(self._sql(sql.FAIR_SET), list(changed), list(changed.values()))
            else:
                after: tuple[int, float, int] = (-1, float("-inf"), -1)
                while len(picked) < want:
                    page = await conn.fetch(self._sql(sql.LIMITED_DUE), *args, *after, list(held))
                    await book.read(conn, self._sql, (row[3] for row in page))
                    picked += limit_rules.pick(((row[0], row[3]) for row in page), running, overrides,
                                               want - len(picked), held, book)
                    if len(page) < 200:
                        break
                    after = (page[-1][1], page[-1][2], page[-1][0])
            if not picked:
                return []
            # A claim that read rates judged them by the server's time of this transaction
            # (Book.read): its starts are stamped with the same.
            rows = await conn.fetch(self._sql(sql.LIMITED_CLAIM), book.now if book.spends else now,
                                    params.worker_id, params.lease_s, picked, self.channels["events"])
            if book.spends:
                await conn.execute(self._sql(_RATE_PRUNE), book.now - rate_rules.PRUNE_AFTER_S)
                await conn.executemany(self._sql(_RATE_SPEND), book.written(row[0] for row in rows))
        return _claimed(rows)

    async def _fair_state(self, conn: asyncpg.Connection, texts: list[str | None]) -> fair_rules.FairState:
        """The passes of the fair keys of these limits texts, and V (under the lock)."""
        rows = await conn.fetch(self._sql(sql.FAIR_STATE), [fair_rules.VT, *fair_rules.slots_of(texts)])
        passes = {row[0]: float(row[1]) for row in rows if row[1] is not None}
        return fair_rules.FairState(passes, passes.pop(fair_rules.VT, 0.0))

    def _claim_args(self, params: RunClaimParams) -> tuple[Any, ...]:
        """CLAIM's $1..$9."""
        return (list(params.queues), list(params.tasks), self.clock.judged(params.now), params.limit,
                params.worker_id, params.lease_s, self.channels["events"],
                None if params.majors is None else rules.claim_keys(params.majors), params.fleet)

    async def run_extend(self, params: RunExtendParams) -> RunExtendResult:
        if not params.runs:
            return RunExtendResult()
        ids, fences = zip(*sorted(params.runs))  # rows locked in id order, as the rescuer's
        rows = await self._fetch_raw(sql.EXTEND, self.clock.judged(params.now), params.worker_id,
                                     list(ids), list(fences), params.lease_s)
        kept = {row[0] for row in rows}
        return RunExtendResult(lost=[i for i in ids if i not in kept],
                               cancel_requested=[row[0] for row in rows if row[1]])

    async def run_finish_claim(self, params: Sequence[RunFinishParams],
                               claim: RunClaimParams) -> tuple[list[int], list[Run]]:
        if not params or not all(p.alone for p in params):
            return await self.run_finish_many(params), await self.run_claim(claim)
        # One statement (see sql.FINISH_CLAIM), on the claiming pool: the claim's plan
        # wants its settings (see GENERIC_PLAN), and on the store's own pool the whole
        # statement was planned anew at every call (server CPU 103 against 81 us a run,
        # batches of 40, alternated blocks).
        args = self._finish_args(params)
        async with self._conn(self._claiming) as conn:
            rows = await conn.fetch(self._sql(sql.FINISH_CLAIM), *args, *self._claim_args(claim))
        unwritten = set(rows[0][-2] or ())
        refused = await self._refused(params, {p.run_id for p in params} - unwritten)
        self.hub.fire_finished(params)
        runs = _claimed([row for row in rows if row[0] is not None])
        if claim.limited and len(runs) < claim.limit:
            runs += await self._claim_limited(claim, claim.limit - len(runs))
        return refused, runs

    def _finish_args(self, params: Sequence[RunFinishParams]) -> tuple[Any, ...]:
        """FINISH_MANY's $1..$5."""
        now = self.clock.now(params[0].now)
        # In id order, as renewals and the rescuer lock rows: a finish and a renewal of the
        # same runs in another session otherwise deadlock (seen under load; retried, slow).
        ends = json.dumps([(p.run_id, p.fence, p.state, p.result, p.error,
                            p.run_at if p.run_at is not None else now, p.release, p.kind,
                            p.event_data, p.waiting) for p in sorted(params, key=lambda p: p.run_id)])
        return now, ends, self.channels["done"], self.channels["queued"], self.channels["events"]

    async def _refused(self, params: Sequence[RunFinishParams], done: set[int]) -> list[int]:
        """The ids of `params` a finish did not write (not in `done`) and did not write
        before either (a retry after a lost reply): their fence was refused."""
        refused = [p for p in params if p.run_id not in done]
        if refused:
            confirmed = {row[0] for row in await self._fetch_raw(
                sql.FINISH_CONFIRM, [p.run_id for p in refused], [p.fence for p in refused],
                [p.state.value for p in refused])}
            refused = [p for p in refused if p.run_id not in confirmed]
        return [p.run_id for p in refused]

    async def run_finish_many(self, params: Sequence[RunFinishParams]) -> list[int]:
        if not params:
            return []
        finish = self._finish_args(params)
        now, args = finish[0], (self._sql(sql.FINISH_MANY), *finish)
        if all(p.alone for p in params):
            # No BEGIN/COMMIT (two round trips of three): the statement is atomic by
            # itself, and no run of the batch has a parent to wake or a thread to go on.
            async with self._conn() as conn:
                rows = await conn.fetch(*args)
        else:
            async with self._conn() as conn, conn.transaction():
                rows = await conn.fetch(*args)
                await self._after_finish(conn, rows, now)
        refused = await self._refused(params, {row[0] for row in rows})
        self.hub.fire_finished(params)
        return refused

    async def _after_finish(self, conn: asyncpg.Connection, rows: list[asyncpg.Record], now: float) -> None:
        """What a batch of ends sets off: parents wake, a rolled-back run's thread
        messages go, and the next run of an ended run's thread may be claimed."""
        ended = [row for row in rows if row[1] != "queued"]
        parents = [row[2] for row in ended if row[2] is not None]
        if parents:
            await conn.execute(self._sql(q.WAKE_PARENTS), parents, now)
        rolled_back = [row[0] for row in ended if row[1] == "interrupted" and row[5] == "rollback"]
        if rolled_back:
            await conn.execute(self._sql(q.THREAD_FORGET_RUN), rolled_back)
        if parents or any(row[3] is not None for row in ended):
            await conn.execute("SELECT pg_notify($1, '')", self.channels["queued"])


# -- rates per key (store._rate_rules) ----------------------------------------------

# A claim's time (its transaction's, when the claim gives none) and the spends in their
# window of the keys $2, read under the limited claim's lock.
_RATE_LOG = """
WITH t AS (SELECT NOW($1) AS now)
SELECT t.now, (SELECT coalesce(json_agg(json_build_array(slot, until, cost)), '[]')::text
               FROM rate_spent WHERE slot = ANY($2::text[]) AND until > t.now)
FROM t"""
_RATE_SPEND = ("INSERT INTO rate_spent (slot, until, cost, run_id) VALUES ($1, $2, $3, $4)"
               " ON CONFLICT DO NOTHING")
_RATE_PRUNE = "DELETE FROM rate_spent WHERE until <= $1"


class _Book(rate_rules.Book):
    """The limited claim's rates, read before each pick: asyncpg cannot be asked from
    within the pick."""

    def __init__(self, now: float | None, overrides: dict[str, int]) -> None:
        super().__init__(0.0 if now is None else now, overrides)
        self._given = now

    async def read(self, conn: asyncpg.Connection, prepare: Any, texts: Iterable[str | None]) -> None:
        wanted = self.missing(texts)
        if not wanted:
            return
        at, logs = await conn.fetchrow(prepare(_RATE_LOG), self._given, wanted)
        self.now = self._given = float(at)  # later reads of this claim judge by the same time
        found: dict[str, list[tuple[float, float]]] = {}
        for s, until, cost in json.loads(logs):
            found.setdefault(s, []).append((float(until), float(cost)))
        self.add(found, wanted)


# -- helpers --------------------------------------------------------------------------


def _insert_row(p: RunInsertParams, now: float) -> tuple[Any, ...]:
    """One run's values in sql.INSERT_FIELDS' order: INSERT_ONE's $1..$17, a row of
    INSERT_MANY's JSON."""
    return (p.key, p.task, p.queue, p.priority, p.args, p.max_attempts, p.timeout_s,
            p.run_at if p.run_at is not None else now, p.parent_id, p.budget,
            p.deadline_at, p.thread, p.tenant, p.traceparent, p.version, p.major, p.limits)


def _insert_rows(params: Sequence[RunInsertParams], now: float) -> str:
    """The $1 of INSERT_MANY and INSERT_FRESH."""
    return json.dumps([_insert_row(p, now) for p in params])


# A row of _insert_row's: the fields its run alone has (sql.PER_RUN), and the others.
_PER_RUN = [i for i, (name, _) in enumerate(sql.INSERT_FIELDS) if name in sql.PER_RUN]
_SHARED = operator.itemgetter(*(i for i in range(len(sql.INSERT_FIELDS)) if i not in _PER_RUN))


def _fresh_insert(params: Sequence[RunInsertParams], now: float) -> tuple[str, tuple[Any, ...]]:
    """The insert of a batch of fresh keys, and its values up to `now` and the channel:
    INSERT_UNIFORM when its runs differ only in sql.PER_RUN, else INSERT_FRESH."""
    rows = [_insert_row(p, now) for p in params]
    shared = _SHARED(rows[0])
    if all(_SHARED(row) == shared for row in rows):
        return sql.INSERT_UNIFORM, (*([row[i] for row in rows] for i in _PER_RUN), *shared)
    return sql.INSERT_FRESH, (json.dumps(rows),)


def _made(params: Sequence[RunInsertParams], rows: Sequence[asyncpg.Record],
          now: float) -> dict[tuple[str, str], Run]:
    """The runs an insert of `params` made, by tenant and key, from its rows: each run's
    place in `params` (from 1), its id and whether it was born cancelled."""
    made = {}
    for place, run_id, _, born_cancelled in rows:
        p = params[place - 1]
        run = p.as_run(run_id, now)
        made[p.tenant or "", p.key] = rules.born_cancelled_run(run, now) if born_cancelled else run
    return made


def _claimed(rows: Sequence[asyncpg.Record]) -> list[Run]:
    """The runs a claim's rows hold, in claim order (RETURNING has none)."""
    runs = [run_from_row(row) for row in rows]
    runs.sort(key=lambda r: (r.priority, r.run_at, r.id))
    return runs


def _chunks(items: Iterable[RunInsertParams], size: int) -> Iterator[list[RunInsertParams]]:
    """`items` in lists of `size`, pulled one list at a time."""
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        # A batch is judged by its first chunk (submit_many's runs are of one task): runs
        # with flow control past it would skip their keys' locks.
        refuse_flow_in(chunk)
        yield chunk


def _in_order(params: Sequence[RunInsertParams], found: dict[tuple[str, str], Run]) -> list[Run]:
    """Runs in the caller's order; a key repeated within one batch maps to one run."""
    seen: set[tuple[str, str]] = set()
    out = []
    for p in params:
        name = (p.tenant or "", p.key)
        run = found[name]
        if name in seen and not run.existed:
            run = Run(**{f: getattr(run, f) for f in run.__slots__})
            run.existed = True
        seen.add(name)
        out.append(run)
    return out
