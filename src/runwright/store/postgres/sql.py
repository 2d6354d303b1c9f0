"""The SQL of the PostgreSQL store, one statement per operation, with the why of each."""

from __future__ import annotations

from ..rows import RUN_COLUMNS

R_COLUMNS = ", ".join(f"r.{c.strip()}" for c in RUN_COLUMNS.split(","))

INSERT_MANY = f"""
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::text[],
                         $6::integer[], $7::float8[], $8::float8[])
        WITH ORDINALITY AS v(key, task, queue, priority, args, max_attempts, timeout_s, run_at, ord)
), inserted AS (
    -- ORDER BY ord: identity values follow the caller's order, which is claim order's
    -- last tie-breaker. DO NOTHING: an existing key is the idempotent case, read below.
    INSERT INTO runs (key, task, queue, priority, state, args, max_attempts, timeout_s, run_at, created_at)
    SELECT key, task, queue, priority, 'queued', args, max_attempts, timeout_s, run_at, $9
    FROM input ORDER BY ord
    ON CONFLICT (key) DO NOTHING
    RETURNING {RUN_COLUMNS}
), notified AS (
    SELECT pg_notify($10, q.queue) FROM (SELECT DISTINCT queue FROM inserted) q
)
SELECT {RUN_COLUMNS}, (SELECT count(*) FROM notified) FROM inserted
"""

GET_BY_KEYS = f"SELECT {RUN_COLUMNS} FROM runs WHERE key = ANY($1::text[])"
GET = f"SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"
GET_MANY = f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ANY($1::bigint[]) ORDER BY id"
COUNT_BY_STATE = "SELECT state, count(*) FROM runs GROUP BY state"

# Two planner traps. (1) `queue = ANY(...)` cannot walk runs_due in (priority, run_at, id)
# order, so the planner would read and sort every queued run of those queues (a full
# sort per claim once a backlog builds). A LATERAL probe per queue walks the index and
# stops after $4 rows; the outer ORDER BY merges the queues. (2) Without MATERIALIZED the
# CTE may be inlined into the UPDATE's join, where LIMIT and SKIP LOCKED no longer bound
# what is locked. Each probe locks at most $4 rows, skipping those another worker is
# claiming right now; rows locked but not picked are released when the statement commits.
CLAIM = f"""
WITH picked AS MATERIALIZED (
    SELECT c.id FROM unnest($1::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM runs
        WHERE state = 'queued' AND queue = q.name AND run_at <= $3::float8
          AND task = ANY($2::text[])
        ORDER BY priority, run_at, id
        LIMIT $4
        FOR UPDATE SKIP LOCKED
    ) c
    ORDER BY c.priority, c.run_at, c.id
    LIMIT $4
)
UPDATE runs r SET state = 'running', fence = r.fence + 1, attempt = r.attempt + 1,
    owner = $5, lease_expires_at = $3::float8 + $6::float8, started_at = $3::float8,
    cancel_requested = false
FROM picked WHERE r.id = picked.id
RETURNING {R_COLUMNS}
"""

EXTEND = """
UPDATE runs r SET lease_expires_at = $1::float8
FROM unnest($3::bigint[], $4::bigint[]) AS v(id, fence)
WHERE r.id = v.id AND r.fence = v.fence AND r.state = 'running' AND r.owner = $2
RETURNING r.id, r.cancel_requested
"""

# One statement for every fenced end of an attempt: a row changes only if its fence is
# still current and it is still running. `queued` is a retry (run_at = backoff) or, with
# release, a give-back whose attempt does not count. The notifications ride in the same
# statement: ids of ended runs (or '*' when too many for a payload) and "work is due".
FINISH_MANY = """
WITH finished AS (
    UPDATE runs r SET
        state = v.state, owner = NULL, lease_expires_at = NULL,
        result = v.result,
        error = CASE WHEN v.state = 'queued' THEN coalesce(v.error, r.error) ELSE v.error END,
        finished_at = CASE WHEN v.state = 'queued' THEN NULL ELSE $1::float8 END,
        run_at = CASE WHEN v.state = 'queued' THEN v.run_at ELSE r.run_at END,
        attempt = r.attempt - v.release::int
    FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::float8[], $8::bool[])
        AS v(id, fence, state, result, error, run_at, release)
    WHERE r.id = v.id AND r.fence = v.fence AND r.state = 'running'
    RETURNING r.id, v.state
), ended AS (
    SELECT pg_notify($9, CASE WHEN length(ids) < 7900 THEN ids ELSE '*' END)
    FROM (SELECT string_agg(id::text, ',') AS ids FROM finished WHERE state <> 'queued') s
    WHERE ids IS NOT NULL
), requeued AS (
    SELECT pg_notify($10, '') FROM finished WHERE state = 'queued' LIMIT 1
)
SELECT f.id, (SELECT count(*) FROM ended), (SELECT count(*) FROM requeued) FROM finished f
"""

# After a lost reply the finish may have committed: a refused id whose row already shows
# our fence and target state is a success, not a lost lease.
FINISH_CONFIRM = """
SELECT r.id FROM runs r JOIN unnest($1::bigint[], $2::bigint[], $3::text[]) AS v(id, fence, state)
    ON r.id = v.id AND r.fence = v.fence AND r.state = v.state
"""

CANCEL_QUEUED = """
UPDATE runs SET state = 'cancelled', finished_at = $2, error = $3, owner = NULL
WHERE id = $1 AND state = ANY($4::text[])
"""
CANCEL_RUNNING = "UPDATE runs SET cancel_requested = true WHERE id = $1 AND state = 'running'"

RETRY = """
UPDATE runs SET state = 'queued', attempt = 0, recoveries = 0, run_at = $2, result = NULL,
    error = NULL, finished_at = NULL, owner = NULL, lease_expires_at = NULL
WHERE id = $1 AND state = ANY($3::text[])
"""

# Live workers are those whose session still holds their advisory lock: when a worker's
# process or connection dies, PostgreSQL drops the lock at once, so its runs are taken
# back at the next rescue tick instead of after a lease timeout. Expired leases cover a
# stalled worker whose session is still alive.
RESCUE = f"""
WITH live AS (
    SELECT objid::bigint AS worker_id FROM pg_locks
    WHERE locktype = 'advisory' AND classid = $1::oid AND objsubid = 2 AND granted
), gone AS (
    DELETE FROM workers WHERE id NOT IN (SELECT worker_id FROM live) RETURNING id
), rescued AS (
    UPDATE runs SET recoveries = recoveries + 1, attempt = attempt - 1,
        owner = NULL, lease_expires_at = NULL,
        state = CASE WHEN recoveries + 1 > $3::int THEN 'dead' ELSE 'queued' END,
        run_at = CASE WHEN recoveries + 1 > $3 THEN run_at ELSE $2::float8 END,
        finished_at = CASE WHEN recoveries + 1 > $3 THEN $2 END,
        error = CASE WHEN recoveries + 1 > $3 THEN $4::text ELSE error END
    WHERE state = 'running'
      AND (lease_expires_at < $2 OR owner IS NULL OR owner NOT IN (SELECT worker_id FROM live))
    RETURNING {RUN_COLUMNS}
), notified AS (
    SELECT pg_notify($5, '') FROM rescued LIMIT 1
)
SELECT {RUN_COLUMNS}, (SELECT count(*) FROM gone), (SELECT count(*) FROM notified) FROM rescued
"""

NEXT_DUE = """
SELECT min(run_at) FROM runs
WHERE state = 'queued' AND queue = ANY($1::text[]) AND task = ANY($2::text[])
"""

COUNT_DUE_BY_TASK = """
SELECT task, count(*) FROM runs
WHERE state = 'queued' AND run_at < $2::float8 AND queue = ANY($1::text[])
GROUP BY task
"""

WORKER_INSERT = """
INSERT INTO workers (host, pid, queues, tasks, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, $5, $5) RETURNING id
"""
WORKER_HEARTBEAT = "UPDATE workers SET heartbeat_at = $2 WHERE id = $1"
WORKER_DELETE = "DELETE FROM workers WHERE id = $1"
WORKER_LIST = "SELECT id, host, pid, queues, tasks, started_at, heartbeat_at FROM workers ORDER BY id"
