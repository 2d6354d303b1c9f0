"""The SQLite store's write transactions, each a function run whole on the store's thread
inside BEGIN IMMEDIATE (so each holds the database's one write lock from start to end).

Every change of a run's life appends its event in the same transaction, numbered from
`runs.last_seq`: the log is gapless, and a write refused by the fence appends nothing.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Sequence

from ...errors import RunNotFound, ThreadBusy, ThreadDeleted
from ...runs import Run, RunState, check_transition
from ..base import (
    EventAppendParams,
    RunFinishParams,
    RunInsertParams,
    RunRescueParams,
    StepRecordParams,
    now_s,
)
from ..rows import (
    RUN_COLUMNS,
    cancelled_error,
    deadline_error,
    interrupted_error,
    run_from_row,
    step_event_data,
    worker_lost_error,
)
from .liveness import pid_alive

__all__ = [
    "append_events",
    "append_fenced",
    "cancel_run",
    "claim_ids",
    "delete_thread",
    "expire_runs",
    "finish_runs",
    "get_or_raise",
    "insert_runs",
    "insert_threaded",
    "owns",
    "record_step",
    "rescue_runs",
    "retry_run",
    "thread_messages",
    "wake_parents",
]

S = RunState


def get_or_raise(conn: sqlite3.Connection, run_id: int) -> Run:
    row = conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise RunNotFound(f"run {run_id} not found")
    return run_from_row(row)


def append_events(conn: sqlite3.Connection, run_id: int, events: Sequence[tuple[str, str]],
                  now: float, fence: int | None = None) -> list[int] | None:
    """Bump the run's last_seq and insert the events under the new numbers. With a fence,
    only while that claim is current (None when refused)."""
    fenced = " AND fence = ? AND state = 'running'" if fence is not None else ""
    args = (len(events), run_id) + ((fence,) if fence is not None else ())
    row = conn.execute(f"UPDATE runs SET last_seq = last_seq + ? WHERE id = ?{fenced}"
                       f" RETURNING last_seq", args).fetchone()
    if row is None:
        return None
    first = row[0] - len(events) + 1
    seqs = list(range(first, row[0] + 1))
    conn.executemany("INSERT INTO events (run_id, seq, kind, data, at) VALUES (?, ?, ?, ?, ?)",
                     [(run_id, seq, kind, data, now) for seq, (kind, data) in zip(seqs, events)])
    return seqs


def _event(kind: str, **data: Any) -> tuple[str, str]:
    return kind, json.dumps(data)


def insert_runs(conn: sqlite3.Connection, params: Sequence[RunInsertParams]) -> list[Run]:
    """Insert new runs (each with its `submitted` event, seq 1); an existing key returns
    the existing run, marked `existed`."""
    out, events = [], []
    for p in params:
        now = p.now if p.now is not None else now_s()
        row = conn.execute(
            f"INSERT INTO runs (key, task, queue, priority, state, args, max_attempts, timeout_s,"
            f" run_at, created_at, parent_id, budget, deadline_at, thread, tenant, last_seq)"
            f" VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)"
            f" ON CONFLICT (key) DO NOTHING RETURNING {RUN_COLUMNS}",
            (p.key, p.task, p.queue, p.priority, p.args, p.max_attempts, p.timeout_s,
             p.run_at if p.run_at is not None else now, now, p.parent_id, p.budget,
             p.deadline_at, p.thread, p.tenant)).fetchone()
        if row is None:
            run = run_from_row(conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE key = ?",
                                            (p.key,)).fetchone())
            run.existed = True
        else:
            run = run_from_row(row)
            events.append((run.id, 1, *_event("submitted", task=p.task, key=p.key, queue=p.queue,
                                               priority=p.priority, parent=p.parent_id,
                                               thread=p.thread), now))
        out.append(run)
    _insert_events(conn, events)
    return out


def _insert_events(conn: sqlite3.Connection, rows: list[tuple[int, int, str, str, float]]) -> None:
    """Insert events whose seqs the caller already took (by bumping last_seq in its UPDATE)."""
    conn.executemany("INSERT INTO events (run_id, seq, kind, data, at) VALUES (?, ?, ?, ?, ?)", rows)


def claim_ids(conn: sqlite3.Connection, ids: list[int], worker_id: int, lease_s: float,
              now: float) -> list[Run]:
    rows = conn.execute(
        f"UPDATE runs SET state = 'running', fence = fence + 1, attempt = attempt + 1,"
        f" owner = ?, lease_expires_at = ?, started_at = ?, cancel_requested = 0,"
        f" wake_requested = 0, last_seq = last_seq + 1"
        f" WHERE id IN (SELECT value FROM json_each(?)) AND state = 'queued'"
        f" RETURNING {RUN_COLUMNS}",
        (worker_id, now + lease_s, now, json.dumps(ids))).fetchall()
    runs = [run_from_row(row) for row in rows]
    _insert_events(conn, [(r.id, r.last_seq, *_event("started", attempt=r.attempt, worker=worker_id,
                                                     fence=r.fence), now) for r in runs])
    return runs


# The state an attempt's end really leads to: a run that would go back to the queue (a
# retry, a park, a give-back) while a cancel or an interrupt was requested ends now
# instead, so such a request is never lost to a run that was finishing as it came.
_REQUEUE_ENDS_AS = ("CASE WHEN cancel_requested THEN 'cancelled'"
                    " WHEN interrupt IS NOT NULL THEN 'interrupted' ELSE 'queued' END")
_STOPPED_ERROR = ("CASE WHEN cancel_requested THEN ? WHEN interrupt IS NOT NULL THEN ?"
                  " ELSE coalesce(?, error) END")


def _finish_sql(target: RunState, release: bool) -> str:
    """The fenced finish: it changes the run only if the caller's fence is still current."""
    if target is S.QUEUED:
        # Retry after backoff keeps the attempt count; a release (give-back or park) gives
        # the attempt back. A park woken meanwhile by its child comes due at once.
        attempt = "attempt - 1" if release else "attempt"
        return (f"UPDATE runs SET state = {_REQUEUE_ENDS_AS}, owner = NULL, lease_expires_at = NULL,"
                f" attempt = {attempt}, error = {_STOPPED_ERROR},"
                f" finished_at = CASE WHEN {_REQUEUE_ENDS_AS} = 'queued' THEN NULL ELSE ? END,"
                f" run_at = CASE WHEN wake_requested THEN min(?, ?) ELSE ? END, wake_requested = 0,"
                f" last_seq = last_seq + 1"
                f" WHERE id = ? AND fence = ? AND state = 'running'"
                f" RETURNING parent_id, last_seq, state, interrupt")
    return (f"UPDATE runs SET state = '{target.value}', owner = NULL, lease_expires_at = NULL,"
            f" result = ?, error = ?, finished_at = ?, wake_requested = 0, last_seq = last_seq + 1"
            f" WHERE id = ? AND fence = ? AND state = 'running'"
            f" RETURNING parent_id, last_seq, state, interrupt")


_FINISH_SQL = {(state, release): _finish_sql(state, release)
               for state in (S.QUEUED, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.DEAD, S.INTERRUPTED)
               for release in (False, True) if release is False or state is S.QUEUED}


def _finish_args(p: RunFinishParams, now: float) -> tuple[Any, ...]:
    if p.state is S.QUEUED:
        run_at = p.run_at if p.run_at is not None else now
        return (cancelled_error(), interrupted_error(), p.error, now, run_at, now, run_at,
                p.run_id, p.fence)
    return (p.result, p.error, now, p.run_id, p.fence)


def finish_runs(conn: sqlite3.Connection, params: Sequence[RunFinishParams]) -> list[int]:
    """Apply fenced finishes, each with its event; return the refused run ids."""
    refused, parents, events = [], [], []
    for p in params:
        now = p.now if p.now is not None else now_s()
        row = conn.execute(_FINISH_SQL[p.state, p.release], _finish_args(p, now)).fetchone()
        if row is None:
            refused.append(p.run_id)
            continue
        parent_id, seq, state, interrupt = row
        if state == p.state.value:
            events.append((p.run_id, seq, p.kind, p.event_data, now))
        else:  # a cancel or an interrupt came as it finished: it ends that way instead
            events.append((p.run_id, seq, state, "{}", now))
            if interrupt == "rollback":
                conn.execute("DELETE FROM thread_messages WHERE run_id = ?", (p.run_id,))
        if parent_id is not None and state != "queued":
            parents.append(parent_id)
    _insert_events(conn, events)
    wake_parents(conn, parents, now_s())
    return refused


def wake_parents(conn: sqlite3.Connection, parent_ids: list[int], now: float) -> None:
    """A child ended: its parked parent comes due now; a running one will not park long."""
    conn.executemany(
        "UPDATE runs SET run_at = CASE WHEN state = 'queued' THEN min(run_at, ?) ELSE run_at END,"
        " wake_requested = CASE WHEN state = 'running' THEN 1 ELSE wake_requested END WHERE id = ?",
        [(now, parent_id) for parent_id in parent_ids])


def cancel_run(conn: sqlite3.Connection, run_id: int, now: float) -> Run:
    """Cancel the run and its open descendants (children of children too)."""
    run = get_or_raise(conn, run_id)
    if run.state is not S.RUNNING:
        check_transition(run_id, run.state, S.CANCELLED)
    family = [run_id] + [row[0] for row in conn.execute(
        "WITH RECURSIVE tree(id) AS (SELECT id FROM runs WHERE parent_id = ?"
        " UNION SELECT r.id FROM runs r JOIN tree ON r.parent_id = tree.id) SELECT id FROM tree",
        (run_id,))]
    for member in family:
        _cancel_one(conn, get_or_raise(conn, member), now)
    return get_or_raise(conn, run_id)


def _cancel_one(conn: sqlite3.Connection, run: Run, now: float) -> None:
    if run.state is S.RUNNING:
        if not run.cancel_requested:
            conn.execute("UPDATE runs SET cancel_requested = 1 WHERE id = ?", (run.id,))
            append_events(conn, run.id, [_event("cancel_requested")], now)
    elif run.state is S.QUEUED:
        conn.execute("UPDATE runs SET state = 'cancelled', finished_at = ?, error = ?, owner = NULL"
                     " WHERE id = ?", (now, cancelled_error(), run.id))
        append_events(conn, run.id, [_event("cancelled", reason="cancelled on request")], now)
        if run.parent_id is not None:
            wake_parents(conn, [run.parent_id], now)


def retry_run(conn: sqlite3.Connection, run_id: int, now: float) -> Run:
    run = get_or_raise(conn, run_id)
    check_transition(run_id, run.state, S.QUEUED)
    conn.execute("UPDATE runs SET state = 'queued', attempt = 0, recoveries = 0, run_at = ?,"
                 " result = NULL, error = NULL, finished_at = NULL, owner = NULL,"
                 " lease_expires_at = NULL WHERE id = ?", (now, run_id))
    # A retry asked for by hand means "try again": journaled failures run again, while
    # completed steps keep their results.
    # An OutcomeUnknown stays: that call may have happened, and at-most-once means never again.
    conn.execute("DELETE FROM steps WHERE run_id = ? AND status = 'failed'"
                 " AND coalesce(json_extract(error, '$.type'), '') <> 'OutcomeUnknown'", (run_id,))
    append_events(conn, run_id, [_event("requeued", previous=run.state.value)], now)
    return get_or_raise(conn, run_id)


def record_step(conn: sqlite3.Connection, p: StepRecordParams) -> bool:
    """Journal a step and log it, only while the caller's claim is current; a position
    written twice (which only a superseded owner could try) is refused by the primary key."""
    now = p.now if p.now is not None else now_s()
    existing = conn.execute("SELECT fence, name, status, result, error FROM steps"
                            " WHERE run_id = ? AND position = ?", (p.run_id, p.position)).fetchone()
    if existing is not None and (existing[2] != "started" or p.status == "started"):
        # Our own write seen again (a retry after a lost reply) is a success; anything
        # else at a position that holds an outcome is refused, and logs nothing.
        ours = tuple(existing) == (p.fence, p.name, p.status, p.result, p.error)
        return ours and owns(conn, p.run_id, p.fence)
    if append_events(conn, p.run_id, [("step", step_event_data(p))], now, fence=p.fence) is None:
        return False
    # Only a "started" mark (an at-most-once call) may be completed in place, once.
    conn.execute("INSERT INTO steps (run_id, position, name, status, result, error, fence, created_at)"
                 " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, position) DO UPDATE SET"
                 " status = excluded.status, result = excluded.result, error = excluded.error,"
                 " fence = excluded.fence WHERE steps.status = 'started' AND steps.name = excluded.name"
                 " AND excluded.status <> 'started'",
                 (p.run_id, p.position, p.name, p.status, p.result, p.error, p.fence, now))
    return conn.execute("SELECT changes()").fetchone()[0] == 1


def owns(conn: sqlite3.Connection, run_id: int, fence: int) -> bool:
    return conn.execute("SELECT 1 FROM runs WHERE id = ? AND fence = ? AND state = 'running'",
                        (run_id, fence)).fetchone() is not None


def append_fenced(conn: sqlite3.Connection, p: EventAppendParams) -> list[int] | None:
    return append_events(conn, p.run_id, p.events, p.now if p.now is not None else now_s(), p.fence)


def rescue_runs(conn: sqlite3.Connection, p: RunRescueParams, host: str) -> list[Run]:
    """Declare dead the workers whose pid is gone (this host) or whose heartbeat is stale,
    and take back their runs and every run whose lease ran out."""
    now = p.now if p.now is not None else now_s()
    workers = conn.execute("SELECT id, host, pid, heartbeat_at FROM workers").fetchall()
    dead = [wid for wid, w_host, pid, beat in workers
            if beat < now - p.worker_stale_s or (w_host == host and not pid_alive(pid))]
    conn.executemany("DELETE FROM workers WHERE id = ?", [(wid,) for wid in dead])
    over = p.max_recoveries
    rows = conn.execute(
        f"UPDATE runs SET recoveries = recoveries + 1, attempt = attempt - 1,"
        f" owner = NULL, lease_expires_at = NULL,"
        f" state = CASE WHEN recoveries + 1 > ? THEN 'dead' ELSE 'queued' END,"
        f" run_at = CASE WHEN recoveries + 1 > ? THEN run_at ELSE ? END,"
        f" finished_at = CASE WHEN recoveries + 1 > ? THEN ? ELSE NULL END,"
        f" error = CASE WHEN recoveries + 1 > ? THEN ? ELSE error END"
        f" WHERE state = 'running' AND (lease_expires_at < ?"
        f"  OR owner IS NULL OR owner NOT IN (SELECT id FROM workers))"
        f" RETURNING {RUN_COLUMNS}",
        (over, over, now, over, now, over, worker_lost_error(over + 1), now)).fetchall()
    runs = [run_from_row(row) for row in rows]
    for run in runs:
        kind = "dead" if run.state is S.DEAD else "recovered"
        append_events(conn, run.id, [_event(kind, recoveries=run.recoveries)], now)
        run.last_seq += 1
    wake_parents(conn, [r.parent_id for r in runs if r.done and r.parent_id is not None], now)
    return runs


def expire_runs(conn: sqlite3.Connection, now: float) -> list[Run]:
    """End `failed` every open run past its deadline. A running one's owner finds its
    next fenced write refused (the run is no longer running) and abandons it."""
    rows = conn.execute(
        f"UPDATE runs SET state = 'failed', owner = NULL, lease_expires_at = NULL, finished_at = ?,"
        f" error = ?, last_seq = last_seq + 1"
        f" WHERE deadline_at < ? AND state IN ('queued', 'running') RETURNING {RUN_COLUMNS}",
        (now, deadline_error(), now)).fetchall()
    runs = [run_from_row(row) for row in rows]
    _insert_events(conn, [(r.id, r.last_seq, *_event("failed", error="DeadlineExceeded"), now)
                          for r in runs])
    wake_parents(conn, [r.parent_id for r in runs if r.parent_id is not None], now)
    return runs


# -- threads ------------------------------------------------------------------------

OPEN = ("queued", "running")


def insert_threaded(conn: sqlite3.Connection, p: RunInsertParams, on_busy: str) -> Run:
    """Submit to a thread under the write lock: the busy check and the insert are one step."""
    now = p.now if p.now is not None else now_s()
    thread = conn.execute("SELECT deleted_at FROM threads WHERE id = ?", (p.thread,)).fetchone()
    if thread is not None and thread[0] is not None:
        raise ThreadDeleted(f"thread {p.thread!r} was deleted")
    existing = conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE key = ?", (p.key,)).fetchone()
    if existing is not None:
        run = run_from_row(existing)
        run.existed = True
        return run
    if thread is None:
        conn.execute("INSERT INTO threads (id, created_at) VALUES (?, ?)", (p.thread, now))
    open_runs = [run_from_row(row) for row in conn.execute(
        f"SELECT {RUN_COLUMNS} FROM runs WHERE thread = ? AND state IN ('queued', 'running')"
        f" ORDER BY id", (p.thread,))]
    if open_runs and on_busy == "reject":
        raise ThreadBusy(p.thread, open_runs[0].id, open_runs[0].state.value)
    if on_busy in ("interrupt", "rollback"):
        for run in open_runs:
            _interrupt(conn, run, on_busy, now)
    (run,) = insert_runs(conn, [p])
    return run


def _interrupt(conn: sqlite3.Connection, run: Run, mode: str, now: float) -> None:
    """A running run is asked to stop at its next step boundary; a queued one (not yet
    started, or parked) ends `interrupted` at once."""
    if run.state is S.RUNNING:
        conn.execute("UPDATE runs SET interrupt = ? WHERE id = ?", (mode, run.id))
        append_events(conn, run.id, [_event("interrupt_requested", mode=mode)], now)
        return
    conn.execute("UPDATE runs SET state = 'interrupted', interrupt = ?, finished_at = ?, owner = NULL"
                 " WHERE id = ?", (mode, now, run.id))
    if mode == "rollback":
        conn.execute("DELETE FROM thread_messages WHERE run_id = ?", (run.id,))
    append_events(conn, run.id, [_event("interrupted", mode=mode)], now)


def thread_messages(conn: sqlite3.Connection, thread: str, before_run: int | None) -> list[tuple]:
    row = conn.execute("SELECT deleted_at FROM threads WHERE id = ?", (thread,)).fetchone()
    if row is not None and row[0] is not None:
        raise ThreadDeleted(f"thread {thread!r} was deleted")
    return conn.execute(
        "SELECT run_id, idx, message FROM thread_messages WHERE thread_id = ? AND run_id < ?"
        " ORDER BY run_id, idx", (thread, before_run if before_run is not None else 2**62)).fetchall()


def delete_thread(conn: sqlite3.Connection, thread: str, purge: bool, now: float) -> bool:
    found = conn.execute("UPDATE threads SET deleted_at = coalesce(deleted_at, ?) WHERE id = ?",
                         (now, thread)).rowcount
    if purge:
        conn.execute("DELETE FROM thread_messages WHERE thread_id = ?", (thread,))
    return found == 1
