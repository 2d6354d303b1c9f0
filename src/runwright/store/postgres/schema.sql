-- The current runwright schema on PostgreSQL, whole. A new migration changes this file too;
-- the drift test checks that the numbered migrations build exactly this.

CREATE TABLE runs (
    -- identity ids grow with submission: the last tie-breaker of claim order.
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key              text    NOT NULL,
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
    cancel_requested boolean NOT NULL DEFAULT false,
    last_seq         integer NOT NULL DEFAULT 0,
    parent_id        bigint,
    wake_requested   boolean NOT NULL DEFAULT false,
    budget           text,
    deadline_at      double precision,
    thread           text,
    interrupt        text,
    tenant           text,
    traceparent      text,
    -- the submitting app's version and its major (NULL: submitted before runs recorded one)
    version          text,
    major            integer,
    -- the seq of the log's `trimmed` marker (0: never trimmed; migration 14)
    trimmed_seq      integer NOT NULL DEFAULT 0,
    -- its place in its thread's order when it went ahead of waiting runs (NULL: its id;
    -- migration 18)
    turn             double precision
);

-- The claim reads due runs of a queue in (priority, run_at, id) order; the partial index
-- holds only queued runs, so it stays small however many ended runs the table keeps.
CREATE INDEX runs_due ON runs (queue, priority, run_at, id) WHERE state = 'queued';
-- Lease renewal, cancel checks and the rescuer look up running runs by owner and expiry.
CREATE INDEX runs_running ON runs (owner, lease_expires_at) WHERE state = 'running';
-- Not running and succeeded runs: see runs_running, and the primary key (migration 17).
CREATE INDEX runs_state ON runs (state, id) WHERE state NOT IN ('running', 'succeeded');

CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX runs_deadline ON runs (deadline_at) WHERE deadline_at IS NOT NULL
    AND state IN ('queued', 'running');
-- The summary's latency sample: the latest ended runs, a range of this index.
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;

-- Keyed by (run, position): a second write of a position conflicts instead of doubling.
CREATE TABLE steps (
    run_id     bigint  NOT NULL,
    position   integer NOT NULL,
    name       text    NOT NULL,
    status     text    NOT NULL CHECK (status IN ('started', 'done', 'failed')),
    result     text,
    error      text,
    fence      bigint  NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (run_id, position)
);

CREATE TABLE events (
    run_id bigint  NOT NULL,
    seq    integer NOT NULL,
    kind   text    NOT NULL,
    data   text    NOT NULL,
    at     double precision NOT NULL,
    -- an emit's place in its run's code, "<position>.<n>" (NULL: not an emit; migration 19)
    mark   text,
    PRIMARY KEY (run_id, seq)
);
-- The emits of a run by place: a replayed emit is found, not appended again.
CREATE INDEX events_mark ON events (run_id, mark) WHERE mark IS NOT NULL;

CREATE INDEX runs_thread ON runs (thread, id) WHERE thread IS NOT NULL;
CREATE INDEX runs_tenant ON runs (tenant, id) WHERE tenant IS NOT NULL;
-- A key names one run within its tenant ('' for runs of no tenant). Indexed beside runs,
-- not on it: a key is written once, while every claim and finish of a run (never HOT)
-- would add an entry to an index on runs (migration 16).
CREATE TABLE run_keys (
    tenant text   NOT NULL,
    key    text   NOT NULL,
    run_id bigint NOT NULL,
    PRIMARY KEY (tenant, key)
);

CREATE TABLE threads (
    id         text NOT NULL,
    created_at double precision NOT NULL,
    deleted_at double precision,
    tenant     text NOT NULL DEFAULT '',
    -- the id of this incarnation's first run (0 until it is inserted; migration 15)
    incarnation bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id)
);
-- The tombstones a sweep looks for, oldest first (migration 15).
CREATE INDEX threads_deleted ON threads (deleted_at) WHERE deleted_at IS NOT NULL;

-- A thread's history, in (turn, run, index) order: runs of a thread never overlap, and
-- run ids grow in submission order, but for a run that went ahead of waiting ones (its
-- turn, see runs.turn; NULL: its run id). Keyed so that a replayed append is a no-op.
CREATE TABLE thread_messages (
    thread_id  text    NOT NULL,
    run_id     bigint  NOT NULL,
    idx        integer NOT NULL,
    message    text    NOT NULL,
    created_at double precision NOT NULL,
    tenant     text NOT NULL DEFAULT '',
    turn       double precision,
    PRIMARY KEY (tenant, thread_id, run_id, idx)
);

CREATE TABLE workers (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host         text    NOT NULL,
    pid          integer NOT NULL,
    queues       text    NOT NULL,
    tasks        text    NOT NULL,
    started_at   double precision NOT NULL,
    heartbeat_at double precision NOT NULL,
    -- its app's version, and each task with the majors it runs (JSON; NULL: any)
    version      text    NOT NULL DEFAULT '0.0.0',
    majors       text
);

-- Every worker fires due schedules; a fire is a run keyed by the schedule and its
-- fire time, so any number of workers firing it make one run.
CREATE TABLE schedules (
    name           text    PRIMARY KEY,
    cron           text    NOT NULL,
    tz             text    NOT NULL,
    task           text    NOT NULL,
    args           text    NOT NULL,
    queue          text    NOT NULL,
    priority       integer NOT NULL,
    max_attempts   integer NOT NULL,
    misfire        text    NOT NULL CHECK (misfire IN ('skip', 'catch_up')),
    catch_up_limit integer NOT NULL,
    paused         boolean NOT NULL DEFAULT false,
    next_fire_at   double precision NOT NULL,
    created_at     double precision NOT NULL,
    updated_at     double precision NOT NULL
);

-- A question a run asked (ctx.ask, or a tool call waiting for approval), keyed by the
-- run and the journal position of the ask, so a replay finds the same row. The answer
-- and who gave it are written once; the run, parked meanwhile, is woken by it.
CREATE TABLE questions (
    run_id      bigint  NOT NULL,
    position    integer NOT NULL,
    kind        text    NOT NULL CHECK (kind IN ('question', 'approval')),
    body        text    NOT NULL,
    asked_at    double precision NOT NULL,
    answer      text,
    answered_by text,
    answered_at double precision,
    PRIMARY KEY (run_id, position)
);
-- The pending questions, oldest first: what an approver's inbox lists.
CREATE INDEX questions_pending ON questions (asked_at) WHERE answered_at IS NULL;

-- A named lease: one process at a time does what it guards (the retention sweep), and
-- a holder that dies loses it when it lapses.
CREATE TABLE leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at double precision NOT NULL
);

-- The ranges of run ids reclaimed by retention (a handful: each pass widens one), so
-- that a reader of a reclaimed run is told it expired, not that it never existed.
CREATE TABLE reclaimed (
    lo bigint PRIMARY KEY,
    hi bigint NOT NULL
);

-- A thread's events as one log, numbered per thread (tseq 1, 2, 3 ...), so
-- that a follower of the thread resumes from one number.
--
-- The numbers are given when the thread is read (`thread_event_list` numbers what is not
-- numbered yet, under the thread's lock), not when an event is appended: the append
-- paths stay as they were (no trigger, no thread lock on the hot path), and a thread that
-- nobody follows costs nothing. A run's seqs are gapless, so numbering its new events is
-- one INSERT ... SELECT; the next tseq is max(tseq) + 1 (one probe of the key).
CREATE TABLE thread_events (
    tenant    text    NOT NULL,
    thread_id text    NOT NULL,
    tseq      bigint  NOT NULL,
    run_id    bigint  NOT NULL,
    seq       integer NOT NULL,
    PRIMARY KEY (tenant, thread_id, tseq)
);
-- An event is numbered once; how far a run's log is numbered is one probe of this index.
CREATE UNIQUE INDEX thread_events_event ON thread_events (run_id, seq);

-- Token buckets shared by every worker (rate limits per model): a level and when it was
-- stored; what refilled since is reckoned at each take (store/_rules.py, take_from_bucket).
CREATE TABLE rate_buckets (
    name       text PRIMARY KEY,
    tokens     double precision NOT NULL,
    updated_at double precision NOT NULL
);

-- The fleet bus: a row per slot of a fleet root (its generation grows across lives; state
-- NULL: the slot is free), and the queues paused fleet-wide.
CREATE TABLE fleet_slots (
    root         text    NOT NULL,
    kind         text    NOT NULL,
    ordinal      integer NOT NULL,
    generation   bigint  NOT NULL,
    state        text    CHECK (state IN ('ready', 'resyncing', 'recycling')),
    host         text,
    pid          integer,
    drain_s      double precision,
    claimed_at   double precision,
    heartbeat_at double precision,
    expires_at   double precision,
    PRIMARY KEY (root, kind, ordinal)
);

-- Queues paused fleet-wide: no worker of the root claims from them, including workers
-- started later (they read this at boot).
CREATE TABLE fleet_paused_queues (
    root      text NOT NULL,
    queue     text NOT NULL,
    paused_at double precision NOT NULL,
    PRIMARY KEY (root, queue)
);
