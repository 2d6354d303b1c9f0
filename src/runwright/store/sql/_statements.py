"""Statements both SQL dialects run, written once (see `dialect` for the markers).

Times are parameters, so a test injects the clock into every statement; a lease or a
deadline is judged by `NOW($n)`, which on a database shared by machines is the database's
clock unless a time was injected (see `runwright.core._clock`). Every write after a claim is
fenced by `(id, fence)` and `state = 'running'`.
"""

from __future__ import annotations

from .._flow_rules import KEEPING_STATES, MAX_PERIOD_S
from .._rules import PAUSED, PAUSED_AT, REQUEUE_STOPS, RETRYABLE
from ._columns import RUN_COLUMNS, SCHEDULE_COLUMNS, WORKER_COLUMNS

__all__ = [
    "APPEND_EVENT",
    "BUCKET_ENSURE",
    "BUCKET_LOCK",
    "BUCKET_SET",
    "LIMITED_QUEUED",
    "LIMITED_RUNNING",
    "LIMIT_OVERRIDES",
    "RATE_SPENT_LIVE",
    "LIMIT_SET",
    "LIMIT_UNSET",
    "BUMP_SEQ",
    "COUNT_DUE_BY_TASK",
    "DEADLINE_PASSED",
    "DROP_STEPS",
    "DUE_KINDS",
    "DUE_KINDS_OF_TENANT",
    "ENDED",
    "END_QUEUED",
    "EXPIRE",
    "FAIL_UNRUNNABLE",
    "FAMILY",
    "FLOW_DEBOUNCE",
    "FLOW_ENSURE",
    "FLOW_LOCK",
    "FLOW_RECLAIM",
    "FLOW_UNNEEDED",
    "FLOW_SET",
    "GET_BY_KEY",
    "GET_MANY",
    "GET_RUN",
    "LEASE_TAKE",
    "LIST_EVENTS",
    "LIST_STEPS",
    "LIST_STEPS_RESUMABLE",
    "LOCK_RUN",
    "LOCK_RUNS",
    "MESSAGES_BEYOND",
    "MESSAGE_DROP",
    "MESSAGE_RUNS",
    "MESSAGE_RUNS_LOCK",
    "LIMITED_TASKS",
    "NEXT_DUE",
    "NEXT_DUE_LIMITED",
    "NEXT_DUE_UNLIMITED",
    "RATE_NEXT_END",
    "OWNS_RUN",
    "QUEUES_PAUSED",
    "QUEUE_PAUSE",
    "QUEUE_RESUME",
    "QUESTIONS_ASKING",
    "QUESTION_ANSWER",
    "QUESTION_COLUMNS",
    "QUESTION_GET",
    "QUESTION_INSERT",
    "RECLAIMABLE",
    "RECLAIMABLE_OF",
    "RECLAIMED_HAS",
    "RECLAIM_CAPPED",
    "RECLAIM_OLD",
    "RECLAIM_LOCK",
    "HELD_RUN_AT",
    "PAUSE_HOLD",
    "PAUSE_REQUEST",
    "REQUEST_CANCEL",
    "RESUME_RELEASE",
    "RESUME_WITHDRAW",
    "REQUEST_INTERRUPT",
    "RESCUE_ONE",
    "RETRY_RESET",
    "RUN_SET_TURN",
    "RUN_SET_WAITING",
    "SCHEDULE_ADVANCE",
    "SCHEDULE_DELETE",
    "SCHEDULE_DUE",
    "SCHEDULE_LIST",
    "SCHEDULE_PAUSE",
    "SCHEDULE_SAVE",
    "STUCK",
    "THREAD_APPEND",
    "THREAD_BEGIN",
    "THREAD_DELETE",
    "THREAD_DROP_UNBORN",
    "THREAD_ENSURE",
    "THREAD_EVENTS_BEHIND",
    "THREAD_EVENTS_PURGE",
    "THREAD_EVENTS_TOP",
    "THREAD_AFTER",
    "THREAD_EVENT_PAGE",
    "THREAD_FORGET_RUN",
    "THREAD_GET",
    "THREAD_GET_LOCKED",
    "THREAD_LIST",
    "THREAD_LOCK",
    "THREAD_MESSAGES",
    "THREAD_NUMBER_EVENTS",
    "THREAD_OPEN_RUNS",
    "THREAD_PURGE",
    "THREAD_RUNS_BEYOND",
    "THREAD_RUNS_FROM",
    "TOMBSTONES",
    "TOMBSTONE_DROP",
    "TOMBSTONE_EVENTS_DROP",
    "TOMBSTONE_MESSAGES_DROP",
    "TRIMMABLE",
    "TRIM_EVENTS",
    "TRIM_MARK",
    "TRIM_MARKER",
    "TRIM_THREAD_EVENTS",
    "WAKE_PARENTS",
    "WORKER_DELETE",
    "WORKER_DELETE_MANY",
    "WORKER_HEARTBEAT",
    "WORKER_INSERT",
    "WORKER_LIST",
    "stop_error_case",
    "stop_state_case",
]

# -- reading runs -------------------------------------------------------------------

GET_RUN = f"SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"
GET_MANY = f"SELECT {RUN_COLUMNS} FROM runs WHERE id IN_ARRAY($1) ORDER BY id"
LOCK_RUN = f"SELECT {RUN_COLUMNS} FROM runs WHERE id = $1 FOR_UPDATE"
LOCK_RUNS = f"SELECT {RUN_COLUMNS} FROM runs WHERE id IN_ARRAY($1) ORDER BY id FOR_UPDATE"
# A key names one run within its tenant; '' is "no tenant" (the unique index's expression).
GET_BY_KEY = f"SELECT {RUN_COLUMNS} FROM runs WHERE coalesce(tenant, '') = $1 AND key = $2"
FAMILY = """
WITH RECURSIVE tree(id) AS (
    SELECT id FROM runs WHERE parent_id = $1
    UNION SELECT r.id FROM runs r JOIN tree ON r.parent_id = tree.id
)
SELECT id FROM tree ORDER BY id
"""
# Only of runs the worker could claim (claim keys as in the claim, '*': any major; not of
# a queue its fleet $4 paused): a due run it may not take must not wake it.
NEXT_DUE = """
SELECT min(run_at) FROM runs WHERE state = 'queued' AND queue IN_ARRAY($1) AND task IN_ARRAY($2)
  AND (CAST('*' AS text) IN_ARRAY($3) OR major IS NULL
       OR (CAST(major AS text) || ':' || task) IN_ARRAY($3))
  AND NOT EXISTS (SELECT 1 FROM fleet_paused_queues p
                  WHERE p.root = CAST($4 AS text) AND p.queue = runs.queue)
"""
# The same of runs without limits (along runs_free_due), and of runs with limits that come
# due after now ($5, as the claim judges it; along runs_limited_at): neither reads the due
# runs of a full key's backlog.
NEXT_DUE_UNLIMITED = NEXT_DUE.replace("WHERE state = 'queued'", "WHERE state = 'queued' AND limits IS NULL")
NEXT_DUE_LIMITED = NEXT_DUE.replace("WHERE state = 'queued'", "WHERE state = 'queued' AND limits IS NOT NULL"
                                    " AND run_at > NOW($5)")
# When the next window of a start under a rate ends, after now (rate_spent_until).
RATE_NEXT_END = "SELECT min(until) FROM rate_spent WHERE until > NOW($1)"
# The tasks of $2 with queued runs of queues $1 that carry limits (runs_limited_at).
LIMITED_TASKS = """
SELECT DISTINCT task FROM runs WHERE state = 'queued' AND limits IS NOT NULL
  AND queue IN_ARRAY($1) AND task IN_ARRAY($2)
"""
COUNT_DUE_BY_TASK = """
SELECT task, count(*) FROM runs WHERE state = 'queued' AND run_at < $2 AND queue IN_ARRAY($1)
GROUP BY task
"""

# -- the log ------------------------------------------------------------------------

# Bumping last_seq takes the run's row lock: the numbering stays gapless, and an append
# is ordered strictly before or after any other change of the run.
BUMP_SEQ = "UPDATE runs SET last_seq = last_seq + 1 WHERE id = $1 RETURNING last_seq"
APPEND_EVENT = "INSERT INTO events (run_id, seq, kind, data, at) VALUES ($1, $2, $3, $4, $5)"
LIST_EVENTS = """
SELECT run_id, seq, kind, data, at FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3
"""
LIST_STEPS = """
SELECT run_id, position, name, status, result, error, fence, created_at FROM steps
WHERE run_id = $1 ORDER BY position
"""
# From the last snapshot on: the subquery walks the primary key backwards from the newest
# step and stops at the first snapshot, so it reads only the steps since then.
LIST_STEPS_RESUMABLE = """
SELECT run_id, position, name, status, result, error, fence, created_at FROM steps
WHERE run_id = $1 AND position >= coalesce((
    SELECT position FROM steps WHERE run_id = $1 AND name = 'snapshot' AND status = 'done'
    ORDER BY position DESC LIMIT 1), 0)
ORDER BY position
"""
DROP_STEPS = "DELETE FROM steps WHERE run_id = $1 AND position IN_ARRAY($2)"

# -- stopping runs: cancel, interrupt -----------------------------------------------

REQUEST_CANCEL = "UPDATE runs SET cancel_requested = true WHERE id = $1 AND state = 'running'"
REQUEST_INTERRUPT = "UPDATE runs SET interrupt = $2 WHERE id = $1 AND state = 'running'"
# A queued run (not started, or parked) ends at once: cancelled, or interrupted by a
# newer run on its thread.
END_QUEUED = """
UPDATE runs SET state = $2, finished_at = $3, owner = NULL, error = coalesce($4, error),
    interrupt = coalesce($5, interrupt)
WHERE id = $1 AND state = 'queued'
"""
# A child ended: its parked parent comes due now; a running parent is flagged so that
# its park (which may be on its way) wakes at once.
WAKE_PARENTS = f"""
UPDATE runs SET
    run_at = CASE WHEN state = 'queued' AND run_at > $2 AND coalesce(waiting, '') <> '{PAUSED}'
             THEN $2 ELSE run_at END,
    wake_requested = CASE WHEN state = 'running' THEN true ELSE wake_requested END
WHERE id IN_ARRAY($1)
"""

# -- pausing a run (rules.plan_pause, plan_resume) ----------------------------------

# Queued -> paused: held out of every claim and wake (rules.PAUSED_AT), its due time kept
# for a resume of a run that never started.
PAUSE_HOLD = f"""
UPDATE runs SET held_run_at = run_at, run_at = {PAUSED_AT}, waiting = '{PAUSED}'
WHERE id = $1 AND state = 'queued' AND coalesce(waiting, '') <> '{PAUSED}'
"""
PAUSE_REQUEST = "UPDATE runs SET pause_requested = true WHERE id = $1 AND state = 'running'"
# Paused -> due at $2 with fresh attempts (rules.resumed_run_at).
RESUME_RELEASE = f"""
UPDATE runs SET run_at = $2, waiting = NULL, held_run_at = NULL, attempt = 0, recoveries = 0
WHERE id = $1 AND state = 'queued' AND waiting = '{PAUSED}'
"""
RESUME_WITHDRAW = "UPDATE runs SET pause_requested = false WHERE id = $1 AND state = 'running'"
HELD_RUN_AT = "SELECT held_run_at FROM runs WHERE id = $1"

_FLAG_TESTS = {"cancel_requested": "{t}cancel_requested", "interrupt": "{t}interrupt IS NOT NULL"}


def stop_state_case(requested: str, table: str = "") -> str:
    """The state an attempt's end really leads to (`rules.REQUEUE_STOPS`): a requeue
    while a stop is requested ends as that stop instead. `table` qualifies the columns."""
    prefix = f"{table}." if table else ""
    whens = " ".join(f"WHEN {_FLAG_TESTS[stop.flag].format(t=prefix)} THEN '{stop.ends_as.value}'"
                     for stop in REQUEUE_STOPS)
    return f"(CASE WHEN {requested} <> 'queued' THEN {requested} {whens} ELSE 'queued' END)"


def stop_error_case(otherwise: str, table: str = "") -> str:
    """The error a requeue that meets a stop request ends with (else `otherwise`). The
    payloads hold no quote, so they are safe as literals."""
    prefix = f"{table}." if table else ""
    whens = " ".join(f"WHEN {_FLAG_TESTS[stop.flag].format(t=prefix)} THEN '{stop.error}'"
                     for stop in REQUEUE_STOPS)
    return f"(CASE {whens} ELSE {otherwise} END)"


# -- retry, rescue, deadlines -------------------------------------------------------

# A manual retry writes over the state it was judged on, and only a retryable one: the
# row is locked already, and the state and fence are checked again here all the same, so
# no reading of the run outside this statement can let a retry supersede a live claim.
RETRY_RESET = f"""
UPDATE runs SET state = 'queued', attempt = 0, recoveries = 0, run_at = $2, result = NULL,
    error = NULL, finished_at = NULL, owner = NULL, lease_expires_at = NULL, pause_requested = false
WHERE id = $1 AND fence = $3 AND state IN ({", ".join(f"'{state}'" for state in RETRYABLE)})
"""
# Running runs whose lease ran out or whose owner is no longer registered (the dialect
# unregisters dead owners first). The partial index runs_running serves it.
STUCK = f"""
SELECT {RUN_COLUMNS} FROM runs
WHERE state = 'running'
  AND (lease_expires_at < NOW($1) OR owner IS NULL OR owner NOT IN (SELECT id FROM workers))
ORDER BY id FOR_UPDATE
"""
# Applied only while the run is still running under the fence that was judged stuck: an
# owner that finished meanwhile wins, and a second rescuer changes nothing. The attempt
# stays: the next claim continues it (rules: the attempt a run is on). A run asked to
# pause is taken back paused (its owner died before the step boundary it would have
# stopped at).
RESCUE_ONE = f"""
UPDATE runs SET state = $3, recoveries = $4, owner = NULL,
    lease_expires_at = NULL,
    run_at = CASE WHEN $3 = 'queued' AND pause_requested THEN {PAUSED_AT} ELSE $5 END,
    waiting = CASE WHEN $3 = 'queued' AND pause_requested THEN '{PAUSED}' ELSE waiting END,
    pause_requested = false, finished_at = $6, error = $7, last_seq = last_seq + 1
WHERE id = $1 AND fence = $2 AND state = 'running'
RETURNING {RUN_COLUMNS}
"""
DEADLINE_PASSED = """
SELECT 1 FROM runs WHERE deadline_at < NOW($1) AND state IN ('queued', 'running') LIMIT 1
"""
# A running run's owner finds its next fenced write refused (no longer running).
EXPIRE = f"""
UPDATE runs SET state = 'failed', owner = NULL, lease_expires_at = NULL, finished_at = NOW($1),
    error = $2, last_seq = last_seq + 1
WHERE deadline_at < NOW($1) AND state IN ('queued', 'running')
RETURNING {RUN_COLUMNS}
"""

# -- unrunnable runs ----------------------------------------------------------------

# Due runs by what decides who can run them, and how long the longest due of each has
# been; due for at least $2 s by `now` (the injected time, else the database's clock). A
# walk of the queued runs (the partial index runs_due), as often as the rescuer's checks
# (see engine.rescuer: at most every half `unrunnable_after_s`), not on the claim's path.
DUE_KINDS = """
SELECT queue, task, major, count(*), NOW($1) - min(run_at) FROM runs
WHERE state = 'queued' AND run_at <= NOW($1) - CAST($2 AS double precision)
GROUP BY queue, task, major
"""
# The same, of one tenant's runs.
DUE_KINDS_OF_TENANT = DUE_KINDS.replace("GROUP BY", "AND tenant = $3 GROUP BY")
# One kind that no live worker can run (`rules.unrunnable_kinds`) ends `failed`; only runs
# still queued and due that long: a claim that came first wins. Major -1 stands for NULL.
FAIL_UNRUNNABLE = f"""
UPDATE runs SET state = 'failed', owner = NULL, finished_at = NOW($1), error = $6,
    last_seq = last_seq + 1
WHERE state = 'queued' AND queue = $3 AND task = $4 AND coalesce(major, -1) = $5
  AND run_at <= NOW($1) - CAST($2 AS double precision)
RETURNING {RUN_COLUMNS}
"""

# -- paused queues --------------------------------------------------------------------

# The queues a fleet ($1, its root) paused: every claim of that fleet skips them (see the
# claims of each backend), so the set is the truth, not what a worker last heard of it.
QUEUE_PAUSE = """
INSERT INTO fleet_paused_queues (root, queue, paused_at) VALUES ($1, $2, NOW($3))
ON CONFLICT (root, queue) DO NOTHING
"""
QUEUE_RESUME = "DELETE FROM fleet_paused_queues WHERE root = $1 AND queue = $2"
QUEUES_PAUSED = "SELECT queue FROM fleet_paused_queues WHERE root = $1"

# -- threads ------------------------------------------------------------------------

# Flow control per key (store._flow_rules): submitters of one key take turns on its row.
FLOW_ENSURE = "INSERT INTO flow_keys (slot) VALUES ($1) ON CONFLICT (slot) DO NOTHING"
FLOW_LOCK = "SELECT run_id, at FROM flow_keys WHERE slot = $1 FOR_UPDATE"
FLOW_SET = "UPDATE flow_keys SET run_id = $2, at = $3 WHERE slot = $1"
FLOW_DEBOUNCE = "UPDATE runs SET args = $2, run_at = $3 WHERE id = $1 AND state = 'queued'"
RUN_SET_WAITING = "UPDATE runs SET waiting = $2 WHERE id = $1 AND state = 'queued'"
# The records no decision needs any more (store._flow_rules.unneeded: its run in none of
# KEEPING_STATES or gone, and a throttle's MAX_PERIOD_S past its due time), by the store's
# clock. Chosen locked, skipping the keys a submitter holds; the removal judges again in
# a statement of its own, made after the locks were taken, so it sees the run any
# submitter that held the key before committed (in PostgreSQL a DELETE that waited on a
# row judges a subquery on its own older snapshot, which would miss it). A submitter
# that made sure of the row before it went finds it gone under the lock, and makes it
# again (SqlFlow._lock_keys).
# A fair key's pass and V (store._fair_rules, slots "fair/...") are no flow control's
# record: they are kept (removing V alone would let every key met after it come back
# behind the others by all the claims served so far).
_FLOW_UNNEEDED = f"""
substr(flow_keys.slot, 1, 5) <> 'fair/'
AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.id = flow_keys.run_id
            AND runs.state IN ({", ".join(f"'{state}'" for state in KEEPING_STATES)}))
AND (substr(flow_keys.slot, 1, 9) <> 'throttle:' OR flow_keys.at IS NULL
     OR flow_keys.at < NOW(${{now}}) - CAST({MAX_PERIOD_S!r} AS double precision))
"""
FLOW_UNNEEDED = f"""
SELECT slot FROM flow_keys WHERE {_FLOW_UNNEEDED.format(now=1)}
LIMIT $2 FOR_UPDATE_SKIP_LOCKED
"""
FLOW_RECLAIM = f"""
DELETE FROM flow_keys WHERE slot IN_ARRAY($1) AND {_FLOW_UNNEEDED.format(now=2)} RETURNING slot
"""
THREAD_ENSURE = """
INSERT INTO threads (tenant, id, created_at) VALUES ($1, $2, $3) ON CONFLICT (tenant, id) DO NOTHING
"""
# Submissions to one thread take turns on its row: the busy check and the insert are
# one step, so two submissions can never both see the thread idle.
THREAD_LOCK = "SELECT deleted_at FROM threads WHERE tenant = $1 AND id = $2 FOR_UPDATE"
# A thread row is made before its first run, whose id becomes the incarnation (see
# migration 15); a submission that made it and inserted nothing (its key named another
# run) takes it away again, so that no row stands without an incarnation.
THREAD_BEGIN = "UPDATE threads SET incarnation = $3 WHERE tenant = $1 AND id = $2 AND incarnation = 0"
THREAD_DROP_UNBORN = "DELETE FROM threads WHERE tenant = $1 AND id = $2 AND incarnation = 0"
THREAD_GET = """
SELECT id, tenant, incarnation, created_at, deleted_at FROM threads WHERE tenant = $1 AND id = $2
"""
# A retry of a thread's run holds the thread as a submission does, taken before the run
# (the order a submission takes them in): a delete or a reclaim of the thread waits for
# it, and it sees theirs.
THREAD_GET_LOCKED = """
SELECT id, tenant, incarnation, created_at, deleted_at FROM threads WHERE tenant = $1 AND id = $2
FOR_UPDATE
"""
# A listing by thread lists the runs of one thread, not of a name (a condition of run
# lists, after the filter's own): those from its incarnation on, the one a reader holds
# ({held}) or else the one that bears the name now. An earlier thread of the name ended
# before the later one began (its tombstone is reclaimed only once it has no open run,
# and a retry of its runs is refused), so ids tell them apart; a name no thread bears
# lists the runs that name it (0). The index runs_thread serves the range.
THREAD_RUNS_FROM = """
id >= coalesce(CAST(${held} AS bigint),
               (SELECT incarnation FROM threads t WHERE t.tenant = ${tenant} AND t.id = ${thread}), 0)
"""
# With each run's place in the thread's order (rules.thread_turn; NULL: its id).
THREAD_OPEN_RUNS = f"""
SELECT {RUN_COLUMNS}, turn FROM runs
WHERE thread = $2 AND coalesce(tenant, '') = $1 AND state IN ('queued', 'running')
ORDER BY id FOR_UPDATE
"""
# A run that goes ahead of the runs waiting on its thread takes its place ($2).
RUN_SET_TURN = "UPDATE runs SET turn = $2 WHERE id = $1"
# The history before run $3 (NO_RUN_BEFORE: all of it), in the thread's order: (turn, run,
# index), a run's turn being its id unless it went ahead of waiting runs. The bound is
# run $3's own place, read here (its id when there is no such run).
THREAD_MESSAGES = """
SELECT m.run_id, m.idx, m.message FROM thread_messages m, (SELECT coalesce(
    (SELECT coalesce(turn, id) FROM runs WHERE id = $3), CAST($3 AS double precision)) AS turn) b
WHERE m.tenant = $1 AND m.thread_id = $2
  AND (coalesce(m.turn, m.run_id) < b.turn OR (coalesce(m.turn, m.run_id) = b.turn AND m.run_id < $3))
ORDER BY coalesce(m.turn, m.run_id), m.run_id, m.idx
"""
OWNS_RUN = "SELECT 1 FROM runs WHERE id = $1 AND fence = $2 AND state = 'running' FOR_UPDATE"
# The thread and tenant are the run's own: a run writes only to its own thread.
THREAD_APPEND = """
INSERT INTO thread_messages (tenant, thread_id, run_id, idx, message, created_at, turn)
SELECT coalesce(tenant, ''), thread, id, CAST($2 AS integer), $3, CAST($4 AS double precision), turn
FROM runs WHERE id = $1 AND thread IS NOT NULL
ON CONFLICT DO NOTHING
"""
THREAD_FORGET_RUN = "DELETE FROM thread_messages WHERE run_id IN_ARRAY($1)"
THREAD_DELETE = "UPDATE threads SET deleted_at = coalesce(deleted_at, $3) WHERE tenant = $1 AND id = $2"
THREAD_PURGE = "DELETE FROM thread_messages WHERE tenant = $1 AND thread_id = $2"

# A page of threads, newest first, with their runs' facts. `{where}` filters threads
# (tenant, deleted, and the keyset cursor as a row comparison on the same three columns
# as the order, so a page starts exactly after the last one); `{limit}` is a parameter.
# The page is cut first, in the inner query, so the facts are read for its threads only:
# each is a range of the runs_thread index (thread, id), one thread's runs. No index
# orders threads by creation: the inner query reads the tenant's threads (a range of the
# primary key), or every thread for the operator, and keeps the newest in a top-N sort.
THREAD_LIST = """
SELECT page.tenant, page.id, page.created_at, page.deleted_at,
    (SELECT count(*) FROM runs r WHERE r.thread = page.id AND coalesce(r.tenant, '') = page.tenant
        AND r.id >= page.incarnation),
    (SELECT count(*) FROM runs r WHERE r.thread = page.id AND coalesce(r.tenant, '') = page.tenant
        AND r.id >= page.incarnation AND r.state IN ('queued', 'running')),
    newest.id, newest.state, page.incarnation
FROM (SELECT tenant, id, created_at, deleted_at, incarnation FROM threads WHERE {where}
      ORDER BY created_at DESC, tenant DESC, id DESC LIMIT {limit}) AS page
LEFT JOIN runs newest ON newest.id = (
    SELECT max(r.id) FROM runs r WHERE r.thread = page.id AND coalesce(r.tenant, '') = page.tenant
    AND r.id >= page.incarnation)
ORDER BY page.created_at DESC, page.tenant DESC, page.id DESC
"""
THREAD_AFTER = ("(created_at, tenant, id) < (CAST(${0} AS double precision), CAST(${1} AS text),"
                " CAST(${2} AS text))")

# -- a thread's log (thread_events numbers the events of a thread's runs) -----------------
# The thread's runs whose logs grew past what is numbered: runs_thread finds the runs, and
# thread_events_event gives each one's numbered high-water mark in one probe. Only the
# runs of the thread's incarnation (ids from its first run on): the ended runs of an
# earlier thread of that name, deleted and reclaimed, are no part of this one's log.
THREAD_EVENTS_BEHIND = """
SELECT id, numbered, last_seq FROM (
    SELECT id, last_seq,
           coalesce((SELECT max(seq) FROM thread_events te WHERE te.run_id = runs.id), 0) AS numbered
    FROM runs WHERE thread = $2 AND coalesce(tenant, '') = $1
    AND id >= (SELECT incarnation FROM threads t WHERE t.tenant = $1 AND t.id = $2)) AS runs_of_thread
WHERE last_seq > numbered ORDER BY id
"""
THREAD_EVENTS_TOP = "SELECT coalesce(max(tseq), 0) FROM thread_events WHERE tenant = $1 AND thread_id = $2"
# A run's seqs are gapless, so its events (numbered, last] take the next tseqs as
# base + seq, with base = the thread's top tseq - numbered. Only events up to the
# last_seq read: those are committed (the same commit moved last_seq).
THREAD_NUMBER_EVENTS = """
INSERT INTO thread_events (tenant, thread_id, tseq, run_id, seq)
SELECT $1, $2, CAST($3 AS bigint) + seq, run_id, seq FROM events
WHERE run_id = $4 AND seq > $5 AND seq <= $6
"""
THREAD_EVENT_PAGE = """
SELECT te.tseq, e.run_id, e.seq, e.kind, e.data, e.at
FROM thread_events te JOIN events e ON e.run_id = te.run_id AND e.seq = te.seq
WHERE te.tenant = $1 AND te.thread_id = $2 AND te.tseq > $3 ORDER BY te.tseq LIMIT $4
"""
THREAD_EVENTS_PURGE = "DELETE FROM thread_events WHERE tenant = $1 AND thread_id = $2"

# -- schedules ----------------------------------------------------------------------

# A declaration in code updates the definition but keeps the run-time state: paused,
# and the next fire time unless the cron or time zone changed.
SCHEDULE_SAVE = f"""
INSERT INTO schedules ({SCHEDULE_COLUMNS})
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
ON CONFLICT (name) DO UPDATE SET
    next_fire_at = CASE WHEN schedules.cron = excluded.cron AND schedules.tz = excluded.tz
                        THEN schedules.next_fire_at ELSE excluded.next_fire_at END,
    cron = excluded.cron, tz = excluded.tz, task = excluded.task, args = excluded.args,
    queue = excluded.queue, priority = excluded.priority, max_attempts = excluded.max_attempts,
    misfire = excluded.misfire, catch_up_limit = excluded.catch_up_limit,
    updated_at = excluded.updated_at
RETURNING {SCHEDULE_COLUMNS}
"""
SCHEDULE_LIST = f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY name"
SCHEDULE_DUE = f"""
SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE NOT paused AND next_fire_at <= $1 ORDER BY next_fire_at
"""
SCHEDULE_ADVANCE = "UPDATE schedules SET next_fire_at = $3 WHERE name = $1 AND next_fire_at = $2"
SCHEDULE_PAUSE = """
UPDATE schedules SET paused = $2, next_fire_at = coalesce($3, next_fire_at), updated_at = $4
WHERE name = $1
"""
SCHEDULE_DELETE = "DELETE FROM schedules WHERE name = $1"

# -- workers ------------------------------------------------------------------------

WORKER_INSERT = """
INSERT INTO workers (host, pid, queues, tasks, started_at, heartbeat_at, version, majors)
VALUES ($1, $2, $3, $4, $5, $5, $6, $7) RETURNING id
"""
WORKER_HEARTBEAT = "UPDATE workers SET heartbeat_at = $2 WHERE id = $1"
WORKER_DELETE = "DELETE FROM workers WHERE id = $1"
WORKER_DELETE_MANY = "DELETE FROM workers WHERE id IN_ARRAY($1)"
WORKER_LIST = f"SELECT {WORKER_COLUMNS} FROM workers ORDER BY id"

# -- questions --------------------------------------------------------------------------

QUESTION_COLUMNS = "q.run_id, q.position, q.kind, q.body, q.asked_at, q.answer, q.answered_by, q.answered_at"
QUESTION_GET = f"SELECT {QUESTION_COLUMNS} FROM questions q WHERE q.run_id = $1 AND q.position = $2"
QUESTION_INSERT = """
INSERT INTO questions (run_id, position, kind, body, asked_at)
VALUES ($1, CAST($2 AS integer), $3, $4, CAST($5 AS double precision))
"""
# Written once: a second answer (the caller checked under the run's lock) changes nothing.
QUESTION_ANSWER = """
UPDATE questions SET answer = $3, answered_by = $4, answered_at = CAST($5 AS double precision)
WHERE run_id = $1 AND position = $2 AND answered_at IS NULL
"""
# Which of these runs wait on a question nobody answered yet (rules.plan_busy).
QUESTIONS_ASKING = "SELECT DISTINCT run_id FROM questions WHERE run_id IN_ARRAY($1) AND answered_at IS NULL"

# -- retention --------------------------------------------------------------------------

# Taken when free, lapsed, or ours (renewed); one row changed means we hold it.
LEASE_TAKE = """
INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, NOW($3) + $4)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE leases.holder = excluded.holder OR leases.expires_at <= NOW($3)
"""
# The states a run can be reclaimed in: ended. A run that a retry made live again is
# none of them, and every statement that removes runs says so again itself.
ENDED = "('succeeded', 'failed', 'dead', 'cancelled', 'interrupted')"
# The age cut-off: {ended_before} when given, else the store's clock {now} minus the age
# {age}, read in the statement (NOW: the database's own clock unless a time was injected),
# so that the age is judged against the end times the rows carry by one clock, not a
# worker's.
_CUT_OFF = ("coalesce(CAST(${ended_before} AS double precision),"
            " NOW(${now}) - CAST(${age} AS double precision))")
# Ended before the cut-off, oldest ids first: the state index orders each state by id.
# Locked as they are chosen, skipping rows another reclaim holds: two passes at once (a
# worker's and `runwright sweep`'s) take disjoint runs instead of deadlocking on them.
RECLAIMABLE = f"""
SELECT id FROM runs WHERE state IN {ENDED}
AND finished_at < {_CUT_OFF.format(ended_before=1, now=3, age=4)}
ORDER BY id LIMIT $2 FOR_UPDATE_SKIP_LOCKED
"""
# The same, of named runs only ($5): a caller removing what it made.
RECLAIMABLE_OF = f"""
SELECT id FROM runs WHERE id IN_ARRAY($5)
AND state IN {ENDED}
AND finished_at < {_CUT_OFF.format(ended_before=1, now=3, age=4)}
ORDER BY id LIMIT $2 FOR_UPDATE_SKIP_LOCKED
"""
# The removal itself judges again, of the runs chosen ($1), that each is still ended and
# old enough: what it removes is what it returns (with the key it frees), and a run
# that became live since it was chosen (a retry that committed in between) stays.
RECLAIM_OLD = f"""
DELETE FROM runs WHERE id IN_ARRAY($1) AND state IN {ENDED}
AND finished_at < {_CUT_OFF.format(ended_before=2, now=3, age=4)}
RETURNING id, coalesce(tenant, ''), key
"""
RECLAIMED_HAS = "SELECT 1 FROM reclaimed WHERE lo <= $1 AND hi >= $1"
# rules.runs_beyond_thread_cap in SQL: of each thread's runs, all but its newest $1 (by
# id), the ended ones. A window over the threaded runs (runs_thread orders each by id).
THREAD_RUNS_BEYOND = f"""
SELECT id FROM (
    SELECT id, state, row_number() OVER (PARTITION BY coalesce(tenant, ''), thread ORDER BY id DESC) AS newer
    FROM runs WHERE thread IS NOT NULL) AS ranked
WHERE newer > $1 AND state IN {ENDED}
ORDER BY id LIMIT $2
"""
# PostgreSQL locks no rows under a window: the chosen runs are locked apart, skipping
# those another reclaim holds (see RECLAIMABLE), and only while they are still ended (a
# retry that committed since the window was read made its run live).
RECLAIM_LOCK = f"""
SELECT id FROM runs WHERE id IN_ARRAY($1) AND state IN {ENDED} ORDER BY id FOR_UPDATE_SKIP_LOCKED
"""
# The thread cap's removal judges again, of the runs chosen ($1), that each is ended and
# still beyond its thread's cap ($2 newer runs of its thread at least: the $2-th newer one
# exists; $2 - 1 = $3, the offset, never below 0), as RECLAIM_OLD does for ages.
RECLAIM_CAPPED = f"""
DELETE FROM runs WHERE id IN_ARRAY($1) AND state IN {ENDED} AND thread IS NOT NULL
AND (CAST($2 AS integer) <= 0 OR EXISTS (
    SELECT 1 FROM runs newer WHERE newer.thread = runs.thread
    AND coalesce(newer.tenant, '') = coalesce(runs.tenant, '') AND newer.id > runs.id
    ORDER BY newer.id LIMIT 1 OFFSET $3))
RETURNING id, coalesce(tenant, ''), key
"""
# Logs longer than the bound (the marker aside). A scan of runs, no index: two columns a
# row, once a pass, cheaper than an index every append would have to move. Locked as
# chosen, skipping runs another transaction holds (see SqlStore.event_trim).
TRIMMABLE = """
SELECT id, last_seq, trimmed_seq FROM runs WHERE last_seq - trimmed_seq > $1 ORDER BY id LIMIT $2
FOR_UPDATE_SKIP_LOCKED
"""
TRIM_MARK = "UPDATE runs SET trimmed_seq = $2 WHERE id = $1 AND trimmed_seq < $2"
# Everything before the marker, the old marker too; the thread's log loses the same.
TRIM_EVENTS = "DELETE FROM events WHERE run_id = $1 AND seq < $2"
TRIM_THREAD_EVENTS = "DELETE FROM thread_events WHERE run_id = $1 AND seq < $2"
# The newest removed event becomes the marker, in place: its seq (and its tseq in the
# thread's log, if numbered) stays, so nothing is renumbered.
TRIM_MARKER = "UPDATE events SET kind = $3, data = $4, at = $5 WHERE run_id = $1 AND seq = $2"

# Tombstones deleted more than $2 seconds ago by the store's clock (read in the statement,
# as RECLAIMABLE's), oldest first by the partial index threads_deleted. A thread whose
# delete did not finish (an open run left) keeps its tombstone: the name stays taken
# until its runs are over. Locked as chosen, skipping rows another sweep holds; a
# submission to the name waits on the lock and then finds the row gone (a new thread).
_TOMBSTONE_OLD = """
deleted_at IS NOT NULL AND deleted_at < NOW(${now}) - CAST(${age} AS double precision)
AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.thread = threads.id
                AND coalesce(runs.tenant, '') = threads.tenant AND runs.state IN ('queued', 'running'))
"""
TOMBSTONES = f"""
SELECT tenant, id FROM threads WHERE {_TOMBSTONE_OLD.format(now=1, age=2)}
ORDER BY deleted_at LIMIT $3 FOR_UPDATE_SKIP_LOCKED
"""
# The removal judges again that the tombstone is old enough and that no run of it is open;
# the thread's history and log go only once its row went.
TOMBSTONE_DROP = f"""
DELETE FROM threads WHERE tenant = $1 AND id = $2 AND {_TOMBSTONE_OLD.format(now=3, age=4)}
"""
TOMBSTONE_MESSAGES_DROP = "DELETE FROM thread_messages WHERE tenant = $1 AND thread_id = $2"
TOMBSTONE_EVENTS_DROP = "DELETE FROM thread_events WHERE tenant = $1 AND thread_id = $2"
# Of each thread's history, all but its newest $1 messages (in the history's order, see
# THREAD_MESSAGES), sparing those of runs still open (a resume reads them). A window;
# PostgreSQL locks no rows under a window, so the rows it names are locked apart as they are taken, skipping
# those another trim holds: two trims at once take disjoint messages.
MESSAGES_BEYOND = """
SELECT tenant, thread_id, run_id, idx FROM thread_messages WHERE (tenant, thread_id, run_id, idx) IN (
    SELECT tenant, thread_id, run_id, idx FROM (
        SELECT tenant, thread_id, run_id, idx,
               row_number() OVER (PARTITION BY tenant, thread_id
                                  ORDER BY coalesce(turn, run_id) DESC, run_id DESC, idx DESC) AS newer
        FROM thread_messages) AS ranked
    WHERE newer > $1 AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.id = ranked.run_id
                                     AND runs.state IN ('queued', 'running')))
ORDER BY tenant, thread_id, run_id, idx LIMIT $2 FOR_UPDATE_SKIP_LOCKED
"""
# Of the runs whose messages were chosen ($1), those still there, and of them the ended
# ones this trim holds now (skipping runs another transaction holds: a retry in flight).
# A run that is gone cannot come back (ids are never reused), so its messages may go; a
# run that exists and is not held here keeps its messages this pass.
MESSAGE_RUNS = "SELECT id FROM runs WHERE id IN_ARRAY($1)"
MESSAGE_RUNS_LOCK = RECLAIM_LOCK
# The removal judges again that the message's run is not open.
MESSAGE_DROP = """
DELETE FROM thread_messages WHERE tenant = $1 AND thread_id = $2 AND run_id = $3 AND idx = $4
AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.id = $3 AND runs.state IN ('queued', 'running'))
"""

# -- rate limits: token buckets (rules.take_from_bucket decides) ---------------------------
# Made first (full), so that two first takes lock one row instead of both inserting.
BUCKET_ENSURE = """
INSERT INTO rate_buckets (name, tokens, updated_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING
"""
BUCKET_LOCK = "SELECT tokens, updated_at FROM rate_buckets WHERE name = $1 FOR_UPDATE"
BUCKET_SET = "UPDATE rate_buckets SET tokens = $2, updated_at = $3 WHERE name = $1"

# -- concurrency limits per key (tasks._concurrency, store._limit_rules) ---------------

LIMIT_SET = ("INSERT INTO limit_overrides (target, max) VALUES ($1, $2)"
             " ON CONFLICT (target) DO UPDATE SET max = excluded.max")
LIMIT_UNSET = "DELETE FROM limit_overrides WHERE target = $1"
LIMIT_OVERRIDES = "SELECT target, max FROM limit_overrides"
# The limits of the runs running now (runs_limited_running), and of those queued.
LIMITED_RUNNING = "SELECT limits FROM runs WHERE state = 'running' AND limits IS NOT NULL"
LIMITED_QUEUED = "SELECT limits FROM runs WHERE state = 'queued' AND limits IS NOT NULL"
# Rates per key (store._rate_rules): every key's spends whose window has not ended.
RATE_SPENT_LIVE = "SELECT slot, until, cost FROM rate_spent WHERE until > $1"
