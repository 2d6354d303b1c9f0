"""The PostgreSQL store's hot path, one statement per operation, with the why of each.

What both SQL dialects run is in `..sql.statements`; these are the single round trips
that only PostgreSQL can make (data-modifying CTEs, unnest, NOTIFY in the statement).
They use the shared markers (`NOW($n)`, see `..sql.dialect`) and are prepared the same way.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Iterable

from .. import _rules as rules
from .._migrations import schema_sql
from .._rules import PAUSED, PAUSED_AT, REQUEUE_STOPS
from ..sql._columns import R_COLUMNS, RUN_COLUMNS
from ..sql._statements import stop_error_case, stop_state_case

# A NOTIFY payload holds at most 8000 bytes: past this, '*' tells listeners "re-read all".
PAYLOAD_LIMIT = 7900


def notify_ids(channel: str, source: str) -> str:
    """A SELECT that sends the ids of `source` (a FROM clause) on `channel` in one
    notification, or nothing when there are none."""
    return (f"SELECT pg_notify({channel}, CASE WHEN length(ids) < {PAYLOAD_LIMIT} THEN ids ELSE '*' END)\n"
            f"    FROM (SELECT string_agg(id::text, ',') AS ids FROM {source}) s WHERE ids IS NOT NULL")


# A batch that writes to its runs (finish, journal) meets each run by primary key, one
# probe per row, and locks it there. Left to join the batch with runs, the planner takes a
# bitmap scan of every `running` row (runs_running), cheap by the statistics; but that
# index keeps an entry for each run that ran since the last vacuum, and a bitmap scan
# never marks one dead, so every finish read them all again (2.5 ms for a finish of 64
# after 20,000 runs, against 1.1 ms so); with those conditions gone from the UPDATE, it
# took a scan of the whole table instead. A row a takeover changed meanwhile is checked
# again as it is locked (a new fence: not ours, not written), so the UPDATE after needs
# only the ids, which `by_key` hands the primary key.
def still_ours(run_id: str) -> str:
    """The FROM clause's tail keeping a row (alias v, with a fence) whose run `run_id`
    still runs under that fence, locking the run."""
    return (f"CROSS JOIN LATERAL (SELECT FROM runs r WHERE r.id = {run_id} AND r.fence = v.fence"
            f" AND r.state = 'running' FOR UPDATE) held")


def by_key(cte: str, column: str) -> str:
    """`r.id` among the `column` of `cte`, as the primary key's own condition."""
    return f"r.id = ANY (ARRAY(SELECT {column} FROM {cte}))"


# What a run's insert carries, in the order of the store's `_insert_row`: the fields of
# INSERT_MANY's JSON rows, and INSERT_ONE's $1..$17.
INSERT_FIELDS = (("key", "text"), ("task", "text"), ("queue", "text"), ("priority", "smallint"),
                 ("args", "text"), ("max_attempts", "integer"), ("timeout_s", "float8"),
                 ("run_at", "float8"), ("parent_id", "bigint"), ("budget", "text"),
                 ("deadline_at", "float8"), ("thread", "text"), ("tenant", "text"),
                 ("traceparent", "text"), ("version", "text"), ("major", "integer"),
                 ("limits", "text"))


# The fields that differ from run to run in a uniform batch (INSERT_UNIFORM).
PER_RUN = ("key", "args")


# A batch's rows come as one JSON array of arrays ($1), one row per run in INSERT_FIELDS'
# order: asyncpg sends one text parameter, where sixteen arrays cost the submitter ~10 µs a
# run of per-element type checks (measured; the server's cost is the same either way).
# jsonb, not json: json would re-parse a row's text for each of its sixteen fields.
# A uniform batch, whose runs differ only in PER_RUN (the runs of one submit_many of one
# task, as a rule), comes as two text arrays ($1 keys, $2 args) and the other fields once
# ($3..$16): no JSON to make nor to take apart, 2-3 µs a run less in all (measured, 1,000
# a batch in chunks of 200), most of it the server's.
# One run (INSERT_ONE) comes as sixteen parameters, and none of a batch's plumbing (the
# JSON rows, their order, the join back to it, the distinct queues) is run: for one run
# that plumbing cost a seventh of the statement (server CPU 200-220 -> 173-187 µs a submit).
def _source(shape: str) -> tuple[str, str, str]:
    """The SELECT of `input` for a batch of `shape` ("rows", "uniform" or "one"), and the
    markers of `now` and of the channel after its own parameters."""
    after = f"${len(INSERT_FIELDS) + 1}", f"${len(INSERT_FIELDS) + 2}"
    if shape == "one":
        columns = [f"${i}::{kind} AS {name}" for i, (name, kind) in enumerate(INSERT_FIELDS, 1)]
        return "SELECT " + ", ".join(columns), *after
    if shape == "uniform":
        shared = iter(range(len(PER_RUN) + 1, len(INSERT_FIELDS) + 1))  # $3.. after the arrays
        columns = [name if name in PER_RUN else f"${next(shared)}::{kind} AS {name}"
                   for name, kind in INSERT_FIELDS]
        arrays = ", ".join(f"${i}::text[]" for i in range(1, len(PER_RUN) + 1))
        return (f"SELECT {', '.join(columns)}, ord\n    FROM unnest({arrays})"
                f" WITH ORDINALITY AS v({', '.join(PER_RUN)}, ord)", *after)
    columns = [f"(e->>{i})::{kind} AS {name}" for i, (name, kind) in enumerate(INSERT_FIELDS)]
    return (f"SELECT {', '.join(columns)}, ord\n"
            "    FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS v(e, ord)", "$2", "$3")


def _insert(check_keys: bool, shape: str = "rows", children: bool = False) -> str:
    """The insert of a batch of runs (see _source for its shapes). Checking keys, a key that
    exists already is skipped (its run is read after). Not checking (keys made for this
    submission, see RunInsertParams.key_is_fresh), run_keys takes a plain insert: ON
    CONFLICT's speculative insertion and the join on its result were an eighth of the
    statement's cost, and a collision, which only a retry of the same insert meets, fails
    it whole (unique_violation), and the caller retries it checking keys. So every run
    numbered is inserted, and the event, the notification and the answer read `numbered`:
    without a RETURNING and a join back to it, a batch costs 3-5% less (measured, 1,000 a
    batch). A data-modifying CTE runs whole whether or not anything reads it.

    `children`: some run of the batch has a parent, which is read (and locked) for
    rules.born_cancelled; a batch of none takes the statement without that part, as it
    was (its answer's born_cancelled is false), so a run without a parent pays nothing
    for it (the part cost a single submit 15-30% more database CPU, measured)."""
    keyed = ("    -- DO NOTHING: an existing key is the idempotent case, read below; a concurrent\n"
             "    -- submission of the same key waits here for the other's commit.\n"
             "    ON CONFLICT DO NOTHING\n    RETURNING run_id\n") if check_keys else ""
    join = "JOIN keyed k ON k.run_id = n.id" if check_keys else ""
    made = "inserted" if check_keys else "numbered"  # the runs the statement makes
    returning = "    RETURNING id, key, task, queue, priority, parent_id, thread\n" if check_keys else ""
    source, now, channel = _source(shape)
    if children:
        born = (", coalesce(p.cancels, false) AS born_cancelled"
                " FROM input i LEFT JOIN parents p ON p.id = i.parent_id")
        born_answer = "born_cancelled"
    else:
        born, born_answer = " FROM input i", "false"
    if shape == "one":
        numbered = f"SELECT nextval('runs_id_seq') AS id, i.*{born}"
        notified = ""
        answer = f"SELECT 1, id, pg_notify({channel}, queue), {born_answer} FROM {made}"
    else:
        # Ids drawn in the caller's order, which is claim order's last tie-breaker (one
        # evaluation: a CTE with a volatile function is computed once).
        numbered = ("SELECT nextval('runs_id_seq') AS id, i.*"
                    + (f" FROM (SELECT i.*{born} ORDER BY i.ord) i" if children
                       else " FROM (SELECT * FROM input ORDER BY ord) i"))
        notified = (f"), notified AS (\n    SELECT pg_notify({channel}, q.queue)"
                    f" FROM (SELECT DISTINCT queue FROM {made}) q\n")
        answer = (f"SELECT n.ord, n.id, (SELECT count(*) FROM notified), {'n.' if children else ''}"
                  f"{born_answer} FROM "
                  + ("inserted i JOIN numbered n ON n.id = i.id" if check_keys else "numbered n"))
    parents = born_columns = born_values = born_events = ""
    if children:
        cancels = ", ".join(f"'{state}'" for state in rules.CANCELS_CHILDREN)
        # Literals: the payloads hold no quote.
        error, data = f"'{rules.born_cancelled_error()}'", f"'{json.dumps(rules.BORN_CANCELLED_EVENT)}'"
        parents = f"""), parents AS (
    -- rules.born_cancelled: a child of a cancelled family is born cancelled. Its parent
    -- is read under FOR KEY SHARE, held to the insert's commit: a cancel locks the
    -- parent FOR UPDATE, so it waits for this insert and then reads the family with the
    -- child in it, or this insert waits for the cancel and reads the parent it left.
    -- (An update of the parent by its own worker takes a weaker lock: it never waits.)
    SELECT id, (state IN ({cancels}) OR cancel_requested) AS cancels FROM runs
    WHERE id IN (SELECT parent_id FROM input) FOR KEY SHARE
"""
        born_columns = ", finished_at, error"
        born_values = (f",\n           CASE WHEN born_cancelled THEN CAST({now} AS float8) END,"
                       f" CASE WHEN born_cancelled THEN {error} END")
        born_events = f"""), born AS (
    -- Event 2 of a run born cancelled.
    INSERT INTO events (run_id, seq, kind, data, at)
    SELECT n.id, 2, 'cancelled', {data}, {now} FROM numbered n {join} WHERE n.born_cancelled
"""
    state = "CASE WHEN born_cancelled THEN 'cancelled' ELSE 'queued' END" if children else "'queued'"
    last_seq = "CASE WHEN born_cancelled THEN 2 ELSE 1 END" if children else "1"
    return f"""
WITH input AS (
    {source}
{parents}), numbered AS (
    {numbered}
), keyed AS (
    INSERT INTO run_keys (tenant, key, run_id)
    SELECT coalesce(tenant, ''), key, id FROM numbered
{keyed}), inserted AS (
    INSERT INTO runs (id, key, task, queue, priority, state, args, max_attempts, timeout_s,
                      run_at, created_at, parent_id, budget, deadline_at, thread, tenant,
                      traceparent, version, major, limits, last_seq{born_columns})
    OVERRIDING SYSTEM VALUE
    SELECT n.id, key, task, queue, priority, {state}, args, max_attempts, timeout_s, run_at, {now},
           parent_id, budget, deadline_at, thread, tenant, traceparent, version, major, limits,
           {last_seq}{born_values}
    FROM numbered n {join}
{returning}), submitted AS (
    -- Event 1 of every new run's log.
    INSERT INTO events (run_id, seq, kind, data, at)
    SELECT id, 1, 'submitted', json_build_object('task', task, 'key', key, 'queue', queue,
                                                 'priority', priority, 'parent', parent_id,
                                                 'thread', thread)::text, {now}
    FROM {made}
{born_events}{notified})
-- Each new run's place in the input and its id, and whether it was born cancelled: the
-- caller has the rest (see RunInsertParams.as_run), so thirty columns a run are neither
-- sent nor decoded.
{answer}
"""


INSERT_MANY = _insert(check_keys=True)
INSERT_FRESH = _insert(check_keys=False)
INSERT_UNIFORM = _insert(check_keys=False, shape="uniform")
INSERT_ONE = _insert(check_keys=False, shape="one")
# The same for a batch with a child in it (see _insert's `children`; `for_batch`).
_CHILDREN = {INSERT_MANY: _insert(check_keys=True, children=True),
             INSERT_FRESH: _insert(check_keys=False, children=True),
             INSERT_UNIFORM: _insert(check_keys=False, shape="uniform", children=True),
             INSERT_ONE: _insert(check_keys=False, shape="one", children=True)}


# The fences of those of the parents that are running, held to the insert's commit (see
# rules.check_parents_fenced): a takeover, an end or a removal of one waits for it.
RUNNING_AT = "SELECT id, fence FROM runs WHERE id = ANY($1::bigint[]) AND state = 'running' FOR SHARE"


def for_batch(statement: str, parent_ids: Iterable[int | None]) -> str:
    """`statement` (an INSERT_*), or its variant that reads the parents when a run of the
    batch has one."""
    return _CHILDREN[statement] if any(p is not None for p in parent_ids) else statement


# A key names one run within its tenant ('' for none), as run_keys says.
GET_BY_KEYS = (f"SELECT {RUN_COLUMNS} FROM runs WHERE id IN"
               f" (SELECT run_id FROM run_keys WHERE tenant = $1 AND key = ANY($2::text[]))")
GET_BY_KEY = (f"SELECT {RUN_COLUMNS} FROM runs WHERE id ="
              f" (SELECT run_id FROM run_keys WHERE tenant = $1 AND key = $2)")
# The keys of runs just removed ($1: their tenants, '' for none; $2: their keys), freed
# with them.
FORGET_KEYS = ("DELETE FROM run_keys WHERE (tenant, key) IN"
               " (SELECT t, k FROM unnest($1::text[], $2::text[]) AS gone(t, k))")

# Two planner traps. (1) `queue = ANY(...)` cannot walk runs_due in (priority, run_at, id)
# order, so the planner would read and sort every queued run of those queues (a full
# sort per claim once a backlog builds). A LATERAL probe per queue walks the index and
# stops after $4 rows; the outer ORDER BY merges the queues. (2) Without MATERIALIZED the
# CTE may be inlined into the UPDATE's join, where LIMIT and SKIP LOCKED no longer bound
# what is locked. Each probe locks at most $4 rows, skipping those another worker is
# claiming right now; rows locked but not picked are released when the statement commits.
# Due-ness, deadlines and the lease are judged by `now` (the injected time, else the
# database's clock: a worker whose clock is off neither starts runs early nor leases them
# short). A queue its fleet ($9, the root; NULL: none) paused is not probed at all: the
# pause holds in the claim itself, for a worker that has not heard of it too (one primary
# key probe per queue, before its walk).
_CLAIM_CTES = f"""
picked AS MATERIALIZED (
    SELECT c.id FROM unnest($1::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.run_at FROM runs t
        WHERE t.state = 'queued' AND t.queue = q.name AND t.run_at <= NOW($3)
          -- A run that carries concurrency limits is the limited claim's (LIMITED_CLAIM),
          -- never this one's: a filter on the row the walk reads anyway.
          AND t.limits IS NULL
          AND t.task = ANY($2::text[])
          AND NOT EXISTS (SELECT 1 FROM fleet_paused_queues p WHERE p.root = $9::text AND p.queue = q.name)
          -- Only a major the task's code can run, as "<major>:<task>" keys ($8; NULL: any
          -- major); a run that recorded no version is any worker's that has its task. A
          -- filter on the row the probe already reads: the walk of runs_due is unchanged.
          AND ($8::text[] IS NULL OR t.major IS NULL OR (t.major::text || ':' || t.task) = ANY($8::text[]))
          -- Past its deadline, a run is the rescuer's to end, not a worker's to start.
          AND (t.deadline_at IS NULL OR t.deadline_at >= NOW($3))
          -- A thread's run waits while another run of its thread is running, or queued
          -- ahead of it in the thread's order, (turn, id) (rules.thread_turn; a NULL turn
          -- is the id): runs of a thread never overlap, and take their turns in order.
          AND (t.thread IS NULL OR NOT EXISTS (
                SELECT 1 FROM runs o WHERE o.thread = t.thread
                AND o.tenant IS NOT DISTINCT FROM t.tenant AND o.id <> t.id
                AND o.state IN ('queued', 'running')
                AND (o.state = 'running' OR coalesce(o.turn, o.id) < coalesce(t.turn, t.id)
                     OR (coalesce(o.turn, o.id) = coalesce(t.turn, t.id) AND o.id < t.id))))
        ORDER BY t.priority, t.run_at, t.id
        LIMIT $4
        FOR UPDATE SKIP LOCKED
    ) c
    -- Only a registered worker claims: one declared dead (its row deleted) that is in
    -- fact still running takes nothing until its heartbeat registers it again. A
    -- one-time filter (the plan's InitPlan), not a probe per run.
    WHERE EXISTS (SELECT 1 FROM workers w WHERE w.id = $5::bigint)
    ORDER BY c.priority, c.run_at, c.id
    LIMIT $4
), claimed AS (
    UPDATE runs r SET state = 'running', fence = r.fence + 1, attempt = greatest(r.attempt, 1),
        owner = $5, lease_expires_at = NOW($3) + $6::float8, started_at = NOW($3),
        cancel_requested = false, wake_requested = false, last_seq = r.last_seq + 1
    FROM picked WHERE r.id = picked.id
    RETURNING {R_COLUMNS}
), started AS (
    INSERT INTO events (run_id, seq, kind, data, at)
    SELECT id, last_seq, 'started',
           json_build_object('attempt', attempt, 'worker', $5::bigint, 'fence', fence)::text, started_at
    FROM claimed
), notified AS (
    {notify_ids("$7", "claimed")}
)"""
CLAIM = f"WITH {_CLAIM_CTES}\nSELECT *, (SELECT count(*) FROM notified) FROM claimed\n"

# The limited claim (runs that carry concurrency limits, store._limit_rules), in a
# transaction that holds LIMITED_LOCK: one limited claim at a time per schema, so the
# runs running under a key, counted by the statement after the lock (a snapshot of its
# own under READ COMMITTED), cannot be raised by another claim before this one commits.
# Ends and takeovers need no lock: they only lower the counts. Runs without limits never
# take this path (nor this lock).
# JIT off for the transaction (as on the claiming pool, GENERIC_PLAN): LIMITED_DUE over a
# backlog of 20,000 runs is estimated costly enough to be compiled, 90 ms of JIT for a
# 6 ms scan, at every claim.
LIMITED_LOCK = "SELECT pg_advisory_xact_lock($1::int, $2::int), set_config('jit', 'off', true)"
# What makes a run of a limited task that carries limits one a limited claim may take,
# as CLAIM's probe judges it: $1 queues, $2 tasks, $3 now, $4 majors, $5 fleet.
_LIMITED_TAKES = """t.state = 'queued' AND t.limits IS NOT NULL AND t.queue = ANY($1::text[])
  AND t.run_at <= NOW($3) AND t.task = ANY($2::text[])
  AND NOT EXISTS (SELECT 1 FROM fleet_paused_queues p WHERE p.root = $5::text AND p.queue = t.queue)
  AND ($4::text[] IS NULL OR t.major IS NULL OR (t.major::text || ':' || t.task) = ANY($4::text[]))
  AND (t.deadline_at IS NULL OR t.deadline_at >= NOW($3))
  AND (t.thread IS NULL OR NOT EXISTS (
        SELECT 1 FROM runs o WHERE o.thread = t.thread
        AND o.tenant IS NOT DISTINCT FROM t.tenant AND o.id <> t.id
        AND o.state IN ('queued', 'running')
        AND (o.state = 'running' OR coalesce(o.turn, o.id) < coalesce(t.turn, t.id)
             OR (coalesce(o.turn, o.id) = coalesce(t.turn, t.id) AND o.id < t.id))))"""
# The due runs of limited tasks that carry limits (runs_limited_due), in claim order,
# read in pages while the pick wants more. $9: the limits texts held back
# (limit_rules.full, pick's `held`), left out of the walk.
LIMITED_DUE = f"""
SELECT t.id, t.priority, t.run_at, t.limits FROM runs t
WHERE {_LIMITED_TAKES}
  AND (t.priority, t.run_at, t.id) > ($6::smallint, $7::float8, $8::bigint)
  AND t.limits <> ALL($9::text[])
ORDER BY t.priority, t.run_at, t.id
LIMIT 200
"""
# The distinct limits texts of the queued runs, at most $1 (limit_rules.TEXTS_CAP): a
# loose scan of runs_limited_keys, one probe a text however many runs each has.
LIMITED_TEXTS = """
WITH RECURSIVE texts(l, n) AS (
    (SELECT limits, 1 FROM runs WHERE state = 'queued' AND limits IS NOT NULL ORDER BY limits LIMIT 1)
    UNION ALL
    SELECT (SELECT r.limits FROM runs r WHERE r.state = 'queued' AND r.limits IS NOT NULL AND r.limits > t.l
            ORDER BY r.limits LIMIT 1), t.n + 1
    FROM texts t WHERE t.l IS NOT NULL AND t.n < $1
)
SELECT l FROM texts WHERE l IS NOT NULL
"""
# The first runs a claim may take of each text of $6 ($7 of each: limit_rules.heads), each
# read along runs_limited_keys, merged in claim order.
LIMITED_HEADS = f"""
SELECT c.id, c.priority, c.run_at, c.limits FROM unnest($6::text[], $7::int[]) AS x(l, n)
CROSS JOIN LATERAL (
    SELECT t.id, t.priority, t.run_at, t.limits FROM runs t
    WHERE t.limits = x.l AND {_LIMITED_TAKES}
    ORDER BY t.priority, t.run_at, t.id
    LIMIT x.n
) c
ORDER BY c.priority, c.run_at, c.id
"""
# The passes of fair keys and V (store._fair_rules), kept in flow_keys; written back by
# the fair claim under the limited claim's lock.
FAIR_STATE = "SELECT slot, at FROM flow_keys WHERE slot = ANY($1::text[])"
FAIR_SET = """
INSERT INTO flow_keys (slot, at) SELECT * FROM unnest($1::text[], $2::float8[])
ON CONFLICT (slot) DO UPDATE SET at = excluded.at
"""
# Whether a limited claim has anything to look at (runs_limited_due), read before its lock
# is taken: an idle worker with limited tasks costs one probe, not a locked transaction.
LIMITED_ANY = """
SELECT 1 FROM runs t
WHERE t.state = 'queued' AND t.limits IS NOT NULL AND t.queue = ANY($1::text[])
  AND t.run_at <= NOW($3) AND t.task = ANY($2::text[])
LIMIT 1
"""
# The picked runs claimed as CLAIM claims (still queued: a cancel meanwhile wins).
LIMITED_CLAIM = f"""
WITH claimed AS (
    UPDATE runs r SET state = 'running', fence = r.fence + 1, attempt = greatest(r.attempt, 1),
        owner = $2, lease_expires_at = NOW($1) + $3::float8, started_at = NOW($1),
        cancel_requested = false, wake_requested = false, last_seq = r.last_seq + 1
    WHERE r.id = ANY($4::bigint[]) AND r.state = 'queued'
      AND EXISTS (SELECT 1 FROM workers w WHERE w.id = $2::bigint)
    RETURNING {R_COLUMNS}
), started AS (
    INSERT INTO events (run_id, seq, kind, data, at)
    SELECT id, last_seq, 'started',
           json_build_object('attempt', attempt, 'worker', $2::bigint, 'fence', fence)::text, started_at
    FROM claimed
), notified AS (
    {notify_ids("$5", "claimed")}
)
SELECT *, (SELECT count(*) FROM notified) FROM claimed
"""

# The new expiry is `now` (the injected time, else the database's clock) plus the lease.
EXTEND = """
UPDATE runs r SET lease_expires_at = NOW($1) + $5::float8
FROM unnest($3::bigint[], $4::bigint[]) AS v(id, fence)
WHERE r.id = v.id AND r.fence = v.fence AND r.state = 'running' AND r.owner = $2
RETURNING r.id, r.cancel_requested
"""

# The state an attempt's end really leads to (`rules.REQUEUE_STOPS`): a run that would go
# back to the queue while a cancel or an interrupt was requested ends now instead.
ENDS_AS = stop_state_case("v.state", "r")
STOPPED = ", ".join(f"'{stop.ends_as.value}'" for stop in REQUEUE_STOPS)

# One statement for every fenced end of an attempt: a row changes only if its fence is
# still current and it is still running. `queued` is a retry (run_at = backoff) or, with
# release, a give-back or a park whose attempt goes on; a retry moves on to the next
# attempt (rules: the attempt a run is on). A park woken meanwhile by its child comes due
# at once. Each end appends its event under the next seq, and the
# notifications ride along: ids of ended runs (or '*' when too many for a payload),
# "work is due", and "these logs grew".
_FINISH_CTES = f"""
mine AS MATERIALIZED (
    SELECT v.* FROM (
        SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS fence, e->>2 AS state,
               e->>3 AS result, e->>4 AS error, (e->>5)::float8 AS run_at,
               (e->>6)::bool AS release, e->>7 AS kind, e->>8 AS data, e->>9 AS waiting
        FROM jsonb_array_elements($2::jsonb) AS j(e)) v  -- one row per end, as INSERT_MANY's
    {still_ours("v.id")}
), finished AS (
    UPDATE runs r SET
        state = {ENDS_AS}, owner = NULL, lease_expires_at = NULL,
        result = v.result,
        error = CASE WHEN {ENDS_AS} = 'queued' THEN coalesce(v.error, r.error)
                     WHEN {ENDS_AS} = v.state THEN v.error
                     ELSE {stop_error_case("v.error", "r")} END,
        finished_at = CASE WHEN {ENDS_AS} = 'queued' THEN NULL ELSE $1::float8 END,
        run_at = CASE WHEN v.state <> 'queued' THEN r.run_at
                      WHEN r.pause_requested AND {ENDS_AS} = 'queued' THEN {PAUSED_AT}
                      WHEN r.wake_requested AND v.waiting IS DISTINCT FROM '{PAUSED}'
                      THEN least(v.run_at, $1::float8) ELSE v.run_at END,
        attempt = r.attempt + ({ENDS_AS} = 'queued' AND NOT v.release)::int,
        wake_requested = false,
        waiting = CASE WHEN {ENDS_AS} = 'queued' THEN
                      (CASE WHEN r.pause_requested THEN '{PAUSED}' ELSE v.waiting END) END,
        pause_requested = false,
        last_seq = r.last_seq + 1
    FROM mine v WHERE r.id = v.id AND {by_key("mine", "id")}
    RETURNING r.id, r.state, r.last_seq, r.parent_id, v.state AS asked,
              CASE WHEN r.waiting = '{PAUSED}' AND v.waiting IS DISTINCT FROM '{PAUSED}' THEN 'paused'
                   WHEN r.state = v.state THEN v.kind ELSE r.state END AS kind,
              CASE WHEN r.state = v.state THEN v.data ELSE '{{}}' END AS data, r.thread, r.interrupt,
              r.limits IS NOT NULL AS limited
), logged AS (
    INSERT INTO events (run_id, seq, kind, data, at)
    SELECT id, last_seq, kind, data, $1::float8 FROM finished
), ended AS (
    {notify_ids("$3", "finished WHERE state <> 'queued'")}
), requeued AS (
    -- Work is due again: a requeue, or the end of a limited run (its slot is free, and
    -- runs held back by its limits may go: claimers are woken now, not at their poll).
    SELECT pg_notify($4, '') FROM finished WHERE state = 'queued' OR limited LIMIT 1
), grown AS (
    {notify_ids("$5", "finished")}
)"""
FINISH_MANY = f"""WITH {_FINISH_CTES}
SELECT f.id, f.state, f.parent_id, f.thread, f.asked, f.interrupt, (SELECT count(*) FROM ended),
       (SELECT count(*) FROM requeued), (SELECT count(*) FROM grown)
FROM finished f
"""

def _shifted(statement: str, by: int) -> str:
    """`statement` with its parameters renumbered: $n becomes $(n + by)."""
    return re.sub(r"\$(\d+)", lambda m: f"${int(m[1]) + by}", statement)


# A worker's finishes and its next claim in one statement (FINISH_MANY's $1..$5, then
# CLAIM's as $6..$14): one commit, one round trip and one plan's start-up where there were
# two, which at the batches a busy worker writes (30-40 runs) was the larger part of the
# server's cost of a run. The two touch different rows (running ones, queued ones) under
# one snapshot: a run this finish puts back in the queue is claimable from the next
# statement on, as it would have been after a finish on its own. Only for finishes that
# set nothing else off (`RunFinishParams.alone`, see PostgresStore.run_finish_many). One
# row at least: the claimed runs (none: a row of NULLs), beside each the ids of the ends
# not written (mostly none: the finished ids, repeated on every row, made a claim of 200
# cost the submitter 30 us a run to decode where the two statements cost 14).
FINISH_CLAIM = f"""WITH {_FINISH_CTES},
{_shifted(_CLAIM_CTES, 5)}
SELECT c.*, d.unwritten, d.notified
FROM (SELECT (SELECT array_agg((e->>0)::bigint) FROM jsonb_array_elements($2::jsonb) AS j(e)
              WHERE (e->>0)::bigint NOT IN (SELECT id FROM finished)) AS unwritten,
             (SELECT count(*) FROM ended) + (SELECT count(*) FROM requeued)
             + (SELECT count(*) FROM grown) + (SELECT count(*) FROM notified) AS notified) d
LEFT JOIN claimed c ON true
"""


# After a lost reply the finish may have committed: a refused id whose row already shows
# our fence and target state is a success, not a lost lease.
FINISH_CONFIRM = f"""
SELECT r.id FROM runs r JOIN unnest($1::bigint[], $2::bigint[], $3::text[]) AS v(id, fence, state)
    ON r.id = v.id AND r.fence = v.fence
    AND (r.state = v.state OR (v.state = 'queued' AND r.state IN ({STOPPED})))
"""





# Fenced append: only while the caller's claim is current. The UPDATE takes the run's
# row lock, so a takeover (which updates the same row) orders strictly before or after.
APPEND_EVENTS_FENCED = """
WITH bumped AS (
    UPDATE runs SET last_seq = last_seq + cardinality($3::text[])
    WHERE id = $1 AND fence = $2 AND state = 'running'
    RETURNING last_seq
), appended AS (
    INSERT INTO events (run_id, seq, kind, data, at)
    SELECT $1, b.last_seq - cardinality($3::text[]) + v.ord, v.kind, v.data, $5
    FROM bumped b, unnest($3::text[], $4::text[]) WITH ORDINALITY AS v(kind, data, ord)
    RETURNING seq
), notified AS (
    SELECT pg_notify($6, $1::text) FROM bumped
)
SELECT seq, (SELECT count(*) FROM notified) FROM appended ORDER BY seq
"""


# An emit, appended once (EventAppendParams.mark): when the run's log holds an event at
# that place ($6) of that kind ($3), found through events_mark, nothing is appended;
# else, unless the caller replays ($7), it is appended as APPEND_EVENTS_FENCED does (the
# UPDATE is the fence, ordered against a takeover by the row lock). `ours` reads the
# claim for the found case, which writes nothing. Returns (ours, appended seq, found seq).
APPEND_MARKED = """
WITH ours AS (
    SELECT 1 FROM runs WHERE id = $1 AND fence = $2 AND state = 'running'
), found AS (
    SELECT seq FROM events WHERE run_id = $1 AND mark = $6 AND kind = $3 ORDER BY seq LIMIT 1
), bumped AS (
    UPDATE runs SET last_seq = last_seq + 1
    WHERE id = $1 AND fence = $2 AND state = 'running' AND NOT $7::bool
      AND NOT EXISTS (SELECT 1 FROM found)
    RETURNING last_seq
), appended AS (
    INSERT INTO events (run_id, seq, kind, data, at, mark)
    SELECT $1, last_seq, $3, $4, $5, $6 FROM bumped
    RETURNING seq
), notified AS (
    SELECT pg_notify($8, $1::text) FROM bumped
)
SELECT EXISTS (SELECT 1 FROM ours), (SELECT seq FROM appended), (SELECT seq FROM found),
       (SELECT count(*) FROM notified)
"""


# The fence check is the UPDATE of the run's row (bumping last_seq for the `step` event):
# it takes the row lock, so a takeover's UPDATE of that row is ordered strictly before
# (and this writes nothing) or after (and then the new owner reads this entry).
# The steps of several runs, one entry per run, as one JSON array of arrays ($1: run id,
# fence, position, name, status, result, error, the `step` event's data): a step is
# judged alone, as one write would be. Not when the position already holds an outcome:
# that write is refused, and must not leave a `step` event behind (nor take a seq).
RECORD_STEPS = f"""
WITH v AS MATERIALIZED (
    SELECT (e->>0)::bigint AS run_id, (e->>1)::bigint AS fence, (e->>2)::int AS position,
           e->>3 AS name, e->>4 AS status, e->>5 AS result, e->>6 AS error, e->>7 AS logged
    FROM jsonb_array_elements($1::jsonb) AS j(e)
), mine AS MATERIALIZED (
    SELECT v.* FROM v {still_ours("v.run_id")}
    WHERE NOT EXISTS (SELECT 1 FROM steps s WHERE s.run_id = v.run_id AND s.position = v.position
                      AND (s.status <> 'started' OR v.status = 'started'))
), bumped AS (
    UPDATE runs r SET last_seq = r.last_seq + 1
    FROM mine v WHERE r.id = v.run_id AND {by_key("mine", "run_id")}
    RETURNING r.id, r.last_seq
), stepped AS (
    INSERT INTO steps AS s (run_id, position, name, status, result, error, fence, created_at)
    SELECT v.run_id, v.position, v.name, v.status, v.result, v.error, v.fence, $2::float8
    FROM v JOIN bumped b ON b.id = v.run_id
    -- Only a "started" mark (an at-most-once call) may be completed in place, once.
    ON CONFLICT (run_id, position) DO UPDATE SET
        status = excluded.status, result = excluded.result, error = excluded.error,
        fence = excluded.fence
    WHERE s.status = 'started' AND s.name = excluded.name AND excluded.status <> 'started'
    RETURNING run_id
), logged AS (
    INSERT INTO events (run_id, seq, kind, data, at)
    SELECT b.id, b.last_seq, 'step', v.logged, $2::float8 FROM bumped b JOIN v ON v.run_id = b.id
), notified AS (
    {notify_ids("$3", "bumped")}
)
SELECT run_id, (SELECT count(*) FROM notified) FROM stepped
"""

# A refused journal write whose very entry is already there (same fence, name and
# outcome) was our own earlier write, committed before its reply was lost: a success.
STEP_CONFIRM = """
SELECT 1 FROM steps
WHERE run_id = $1 AND position = $2 AND fence = $3 AND name = $4 AND status = $5
  AND result IS NOT DISTINCT FROM $6 AND error IS NOT DISTINCT FROM $7
  AND EXISTS (SELECT 1 FROM runs WHERE id = $1 AND fence = $3 AND state = 'running')
"""














# -- schema-qualified names ---------------------------------------------------------

# Why every statement names its schema instead of setting search_path for the session: a
# transaction pooler (PgBouncer pool_mode=transaction, and managed poolers that work the
# same way) refuses a search_path startup parameter, and a session `SET` would leave it on
# whichever server session ran it, for other clients. `SET LOCAL` inside every transaction
# would cost the one-statement hot path a BEGIN and a COMMIT. A qualified name costs nothing.
# Every table of the schema (read from schema.sql, so that a migration's new table is
# qualified without anyone remembering to list it), and the migrations' own table.
TABLES = (*re.findall(r"^CREATE TABLE (\w+)", schema_sql(__package__), flags=re.M), "schema_versions")
_SEQUENCE_REFERENCE = re.compile(r"nextval\('(\w+)'\)")
_TABLE_REFERENCE = re.compile(rf"\b(FROM|JOIN|INTO|UPDATE)(\s+)({'|'.join(TABLES)})\b")


@functools.lru_cache(maxsize=1024)
def qualify(statement: str, schema: str) -> str:
    """`statement` (in this dialect) with its tables and sequences named in `schema`. The
    statements write keywords in capitals; a table is what follows FROM, JOIN, INTO or
    UPDATE, a sequence what nextval names."""
    statement = _SEQUENCE_REFERENCE.sub(rf"""nextval('"{schema}".\1')""", statement)
    return _TABLE_REFERENCE.sub(rf'\1\2"{schema}".\3', statement)
