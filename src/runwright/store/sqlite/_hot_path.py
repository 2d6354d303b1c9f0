"""The SQLite store's hot path: submit, claim, renew, finish, journal and event appends.

Each is a function run whole on the store's hot connection, inside BEGIN IMMEDIATE (so
it holds the database's one write lock from start to end) and in one hop to its thread.
Every change of a run's life appends its event in the same transaction, numbered from
`runs.last_seq`: the log is gapless, and a write refused by the fence appends nothing.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Sequence

from ...runs import Run, RunState
from .. import _rules as rules
from .._params import EventAppendParams, RunFinishParams, RunInsertParams, StepRecordParams
from ..sql import _statements as q
from ..sql._columns import RUN_COLUMNS, run_from_row
from ..sql._dialect import SQLITE

__all__ = ["append_fenced", "claim_ids", "finish_runs", "insert_runs", "record_step"]

EventRow = tuple[int, int, str, str, float]
_INSERT_EVENTS = "INSERT INTO events (run_id, seq, kind, data, at) VALUES (?, ?, ?, ?, ?)"
_INSERT_MARKED = "INSERT INTO events (run_id, seq, kind, data, at, mark) VALUES (?, ?, ?, ?, ?, ?)"
_OURS = "SELECT 1 FROM runs WHERE id = ? AND fence = ? AND state = 'running'"
# The first event of the run at that place (events_mark); of another kind, it is not this
# emit (the code changed between attempts), which is then appended.
_MARKED = "SELECT seq FROM events WHERE run_id = ? AND mark = ? AND kind = ? ORDER BY seq LIMIT 1"
_WAKE_PARENTS = SQLITE.prepare(q.WAKE_PARENTS)
_GET_BY_KEY = SQLITE.prepare(q.GET_BY_KEY)


# The id only: the rest of the run is the caller's (RunInsertParams.as_run).
_INSERT_RUN = (
    "INSERT INTO runs (id, key, task, queue, priority, state, args, max_attempts, timeout_s,"
    " run_at, created_at, parent_id, budget, deadline_at, thread, tenant, traceparent,"
    " version, major, limits, last_seq) VALUES (max(coalesce((SELECT max(id) FROM runs), 0), ?) + 1,"
    " ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)"
    " ON CONFLICT (coalesce(tenant, ''), key) DO NOTHING RETURNING id")
_PARENT = "SELECT state, cancel_requested FROM runs WHERE id = ?"
_RUNNING_AT = "SELECT fence FROM runs WHERE id = ? AND state = 'running'"
# A child of a cancelled family (rules.born_cancelled) ends as it is born.
_BORN_CANCELLED = "UPDATE runs SET state = 'cancelled', finished_at = ?, error = ?, last_seq = 2 WHERE id = ?"


def insert_runs(conn: sqlite3.Connection, params: Sequence[RunInsertParams], now: float) -> list[Run]:
    """Insert new runs (each with its `submitted` event, seq 1); an existing (tenant, key)
    returns the existing run, marked `existed`."""
    fenced = rules.fenced_parents(params)
    if fenced:  # in the write transaction: no takeover or removal comes between
        rules.check_parents_fenced(fenced, {
            parent_id: row[0] for parent_id, _ in fenced
            for row in conn.execute(_RUNNING_AT, (parent_id,)).fetchall()})
    out, events = [], []
    # A rowid is the highest one plus one: once retention removed the newest runs, that
    # would hand a reclaimed id to a new run, and a reader of the old one would be shown
    # it. The id is given past every reclaimed one instead (ids are never reused).
    reclaimed_top = conn.execute("SELECT coalesce(max(hi), 0) FROM reclaimed").fetchone()[0]
    # The parents' states are read in this transaction, which holds the database's one
    # write lock: no cancel can come between this read and the insert's commit.
    parents: dict[int, bool] = {}
    for p in params:
        row = conn.execute(_INSERT_RUN, (
            reclaimed_top, p.key, p.task, p.queue, p.priority, p.args, p.max_attempts, p.timeout_s,
            p.run_at if p.run_at is not None else now, now, p.parent_id, p.budget,
            p.deadline_at, p.thread, p.tenant, p.traceparent, p.version, p.major, p.limits)).fetchone()
        if row is None:
            run = run_from_row(conn.execute(_GET_BY_KEY, (p.tenant or "", p.key)).fetchone())
            run.existed = True
        else:
            run = p.as_run(row[0], now)
            events.append((run.id, 1, "submitted", rules.submitted_event(run), now))
            if p.parent_id is not None:
                if p.parent_id not in parents:
                    found = conn.execute(_PARENT, (p.parent_id,)).fetchone()
                    parents[p.parent_id] = (found is not None
                                            and rules.born_cancelled(found[0], bool(found[1])))
                if parents[p.parent_id]:
                    rules.born_cancelled_run(run, now)
                    conn.execute(_BORN_CANCELLED, (now, run.error, run.id))
                    events.append((run.id, 2, "cancelled", json.dumps(rules.BORN_CANCELLED_EVENT), now))
        out.append(run)
    conn.executemany(_INSERT_EVENTS, events)
    return out


def claim_ids(conn: sqlite3.Connection, ids: list[int], worker_id: int, lease_s: float,
              now: float) -> list[Run]:
    rows = conn.execute(
        f"UPDATE runs SET state = 'running', fence = fence + 1, attempt = max(attempt, 1),"
        f" owner = ?, lease_expires_at = ?, started_at = ?, cancel_requested = 0,"
        f" wake_requested = 0, last_seq = last_seq + 1"
        f" WHERE id IN (SELECT value FROM json_each(?)) AND state = 'queued'"
        f" RETURNING {RUN_COLUMNS}",
        (worker_id, now + lease_s, now, json.dumps(ids))).fetchall()
    runs = [run_from_row(row) for row in rows]
    # The `started` data as json.dumps writes it, formatted directly (integers only): a
    # json.dumps a run was a tenth of the claim.
    conn.executemany(_INSERT_EVENTS, [(r.id, r.last_seq, "started", f'{{"attempt": {r.attempt}, '
                                       f'"worker": {worker_id}, "fence": {r.fence}}}', now) for r in runs])
    return runs


def _finish_sql(target: RunState, release: bool) -> str:
    """The fenced finish: it changes the run only if the caller's fence is still current."""
    if target is RunState.QUEUED:
        # A retry after backoff moves on to the next attempt; a release (give-back or
        # park) keeps it (rules: the attempt a run is on). A park woken meanwhile by its
        # child comes due at once.
        ends_as = q.stop_state_case("'queued'")
        attempt = "attempt" if release else f"attempt + ({ends_as} = 'queued')"
        # A requeue while a pause is asked for pauses the run (rules.plan_pause).
        return (f"UPDATE runs SET state = {ends_as}, owner = NULL, lease_expires_at = NULL,"
                f" attempt = {attempt}, error = {q.stop_error_case('coalesce(?, error)')},"
                f" finished_at = CASE WHEN {ends_as} = 'queued' THEN NULL ELSE ? END,"
                f" run_at = CASE WHEN pause_requested AND {ends_as} = 'queued' THEN {rules.PAUSED_AT}"
                f" WHEN wake_requested THEN min(?, ?) ELSE ? END, wake_requested = 0,"
                f" waiting = CASE WHEN {ends_as} = 'queued' THEN"
                f" (CASE WHEN pause_requested THEN '{rules.PAUSED}' ELSE ? END) END,"
                f" pause_requested = 0, last_seq = last_seq + 1"
                f" WHERE id = ? AND fence = ? AND state = 'running'"
                f" RETURNING parent_id, last_seq, state, interrupt, waiting")
    return (f"UPDATE runs SET state = '{target.value}', owner = NULL, lease_expires_at = NULL,"
            f" result = ?, error = ?, finished_at = ?, wake_requested = 0, waiting = NULL,"
            f" pause_requested = 0, last_seq = last_seq + 1"
            f" WHERE id = ? AND fence = ? AND state = 'running'"
            f" RETURNING parent_id, last_seq, state, interrupt")


_ENDS = (RunState.QUEUED, RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.DEAD,
         RunState.INTERRUPTED)
_FINISH_SQL = {(state, release): _finish_sql(state, release)
               for state in _ENDS for release in (False, True)
               if release is False or state is RunState.QUEUED}


def _finish_args(p: RunFinishParams, now: float) -> tuple[Any, ...]:
    if p.state is RunState.QUEUED:
        run_at = p.run_at if p.run_at is not None else now
        # A pause is woken by nothing but a resume: a wake requested meanwhile (a child's
        # end) does not make it due (min(run_at, run_at)).
        woken_at = run_at if p.waiting == rules.PAUSED else now
        return (p.error, now, run_at, woken_at, run_at, p.waiting, p.run_id, p.fence)
    return (p.result, p.error, now, p.run_id, p.fence)


# Ends that are not requeues, all in one statement: the state is the caller's target (no
# stop request changes an end), so the batch's ends differ only in values. One statement
# for a batch costs 7 µs a run where a statement per run cost 11 (measured, 200 a batch).
# MATERIALIZED: the batch is read once, then each of its rows meets its run by id.
_END_MANY = (
    "WITH v(id, fence, state, result, error) AS MATERIALIZED (SELECT value ->> 0, value ->> 1,"
    " value ->> 2, value ->> 3, value ->> 4 FROM json_each(?2))"
    " UPDATE runs SET state = v.state, owner = NULL, lease_expires_at = NULL, result = v.result,"
    " error = v.error, finished_at = ?1, wake_requested = 0, waiting = NULL, pause_requested = 0,"
    " last_seq = last_seq + 1"
    " FROM v WHERE runs.id = v.id AND runs.fence = v.fence AND runs.state = 'running'"
    " RETURNING runs.id, parent_id, last_seq, state, interrupt")


def finish_runs(conn: sqlite3.Connection, params: Sequence[RunFinishParams], now: float) -> list[int]:
    """Apply fenced finishes, each with its event, all at the batch's time `now`; return
    the refused run ids."""
    refused, parents, events = [], [], []
    ends = [p for p in params if p.state is not RunState.QUEUED]
    if len({p.run_id for p in params}) < len(params):
        ends = []  # a run twice in one batch: each finish is judged alone, in order, below
    done = _end_many(conn, ends, now)
    for p in params:
        if ends and p.state is not RunState.QUEUED:
            row = done.get(p.run_id)
        else:
            row = conn.execute(_FINISH_SQL[p.state, p.release], _finish_args(p, now)).fetchone()
        if row is None:
            refused.append(p.run_id)
            continue
        parent_id, seq, state, interrupt = row[:4]
        if _paused_by_request(p, row):
            events.append((p.run_id, seq, "paused", "{}", now))
        elif state == p.state:
            events.append((p.run_id, seq, p.kind, p.event_data, now))
        else:  # a stop request came as it finished: it ends that way instead
            events.append((p.run_id, seq, state, "{}", now))
            if interrupt == "rollback":
                conn.execute("DELETE FROM thread_messages WHERE run_id = ?", (p.run_id,))
        if parent_id is not None and state != "queued":
            parents.append(parent_id)
    conn.executemany(_INSERT_EVENTS, events)
    if parents:
        conn.execute(_WAKE_PARENTS, (json.dumps(parents), now))
    return refused


def _paused_by_request(p: RunFinishParams, row: tuple[Any, ...]) -> bool:
    """A requeue that met a pause request: the run is paused, and its log says so."""
    return len(row) > 4 and row[4] == rules.PAUSED and p.waiting != rules.PAUSED


def _end_many(conn: sqlite3.Connection, ends: Sequence[RunFinishParams],
              now: float) -> dict[int, tuple[Any, ...]]:
    """The ends written, by run id, each as (parent_id, last_seq, state, interrupt)."""
    if not ends:
        return {}
    batch = json.dumps([[p.run_id, p.fence, p.state, p.result, p.error] for p in ends])
    return {row[0]: row[1:] for row in conn.execute(_END_MANY, (now, batch))}


def record_step(conn: sqlite3.Connection, p: StepRecordParams, now: float) -> bool:
    """Journal a step and log it, only while the caller's claim is current; a position
    written twice (which only a superseded owner could try) is refused by the primary key."""
    existing = conn.execute("SELECT fence, name, status, result, error FROM steps"
                            " WHERE run_id = ? AND position = ?", (p.run_id, p.position)).fetchone()
    if existing is not None and (existing[2] != "started" or p.status == "started"):
        # Our own write seen again (a retry after a lost reply) is a success; anything
        # else at a position that holds an outcome is refused, and logs nothing.
        ours = tuple(existing) == (p.fence, p.name, p.status, p.result, p.error)
        return ours and _owns(conn, p.run_id, p.fence)
    logged = rules.step_event(p.position, p.name, p.status, p.error)
    if _append(conn, p.run_id, [("step", logged)], now, p.fence) is None:
        return False
    # Only a "started" mark (an at-most-once call) may be completed in place, once.
    conn.execute("INSERT INTO steps (run_id, position, name, status, result, error, fence, created_at)"
                 " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, position) DO UPDATE SET"
                 " status = excluded.status, result = excluded.result, error = excluded.error,"
                 " fence = excluded.fence WHERE steps.status = 'started' AND steps.name = excluded.name"
                 " AND excluded.status <> 'started'",
                 (p.run_id, p.position, p.name, p.status, p.result, p.error, p.fence, now))
    return bool(conn.execute("SELECT changes()").fetchone()[0] == 1)


def _owns(conn: sqlite3.Connection, run_id: int, fence: int) -> bool:
    return conn.execute("SELECT 1 FROM runs WHERE id = ? AND fence = ? AND state = 'running'",
                        (run_id, fence)).fetchone() is not None


def append_fenced(conn: sqlite3.Connection, p: EventAppendParams, now: float) -> list[int] | None:
    if p.mark is None:
        return _append(conn, p.run_id, p.events, now, p.fence)
    return _append_marked(conn, p, now)


def _append_marked(conn: sqlite3.Connection, p: EventAppendParams, now: float) -> list[int] | None:
    """An emit, appended once (see EventAppendParams.mark), only while the caller's claim
    is current (None when refused)."""
    ((kind, data),) = p.events
    if conn.execute(_OURS, (p.run_id, p.fence)).fetchone() is None:
        return None
    found = conn.execute(_MARKED, (p.run_id, p.mark, kind)).fetchone()
    if found is not None or p.replayed:
        return [] if found is None else [found[0]]
    (seq,) = conn.execute("UPDATE runs SET last_seq = last_seq + 1 WHERE id = ? RETURNING last_seq",
                          (p.run_id,)).fetchone()
    conn.execute(_INSERT_MARKED, (p.run_id, seq, kind, data, now, p.mark))
    return [seq]


def _append(conn: sqlite3.Connection, run_id: int, events: Sequence[tuple[str, str]], now: float,
            fence: int) -> list[int] | None:
    """Bump the run's last_seq and insert the events under the new numbers, only while
    the caller's claim is current (None when refused)."""
    row = conn.execute("UPDATE runs SET last_seq = last_seq + ? WHERE id = ? AND fence = ?"
                       " AND state = 'running' RETURNING last_seq", (len(events), run_id, fence)).fetchone()
    if row is None:
        return None
    seqs = list(range(row[0] - len(events) + 1, row[0] + 1))
    conn.executemany(_INSERT_EVENTS, [(run_id, seq, kind, data, now)
                                      for seq, (kind, data) in zip(seqs, events)])
    return seqs
