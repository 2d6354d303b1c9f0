-- runwright schema 1 on PostgreSQL: runs and workers, in the store's own schema
-- (search_path is set to it in the migrating transaction). Times are epoch seconds
-- (double precision) so that tests can inject the clock into every statement.

CREATE TABLE runs (
    -- identity ids grow with submission: the last tie-breaker of claim order.
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key              text    NOT NULL UNIQUE,
    task             text    NOT NULL,
    queue            text    NOT NULL,
    priority         smallint NOT NULL,
    state            text    NOT NULL CHECK (state IN
                       ('queued','running','succeeded','failed','cancelled','dead','interrupted')),
    args             text    NOT NULL,
    result           text,
    error            text,
    attempt          integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL,
    recoveries       integer NOT NULL DEFAULT 0,
    fence            bigint  NOT NULL DEFAULT 0,
    owner            bigint,
    lease_expires_at double precision,
    timeout_s        double precision,
    run_at           double precision NOT NULL,
    created_at       double precision NOT NULL,
    started_at       double precision,
    finished_at      double precision,
    cancel_requested boolean NOT NULL DEFAULT false
);

-- The claim reads due runs of a queue in (priority, run_at, id) order; the partial index
-- holds only queued runs, so it stays small however many ended runs the table keeps.
CREATE INDEX runs_due ON runs (queue, priority, run_at, id) WHERE state = 'queued';
-- Lease renewal, cancel checks and the rescuer look up running runs by owner and expiry.
CREATE INDEX runs_running ON runs (owner, lease_expires_at) WHERE state = 'running';
CREATE INDEX runs_state ON runs (state, id);

CREATE TABLE workers (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host         text    NOT NULL,
    pid          integer NOT NULL,
    queues       text    NOT NULL,
    tasks        text    NOT NULL,
    started_at   double precision NOT NULL,
    heartbeat_at double precision NOT NULL
);
