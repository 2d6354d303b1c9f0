-- The current runwright schema on SQLite, whole. A new migration changes this file too;
-- the drift test checks that the numbered migrations build exactly this.
-- Times are epoch seconds (REAL) so that tests can inject the clock into every statement.

CREATE TABLE runs (
    -- INTEGER PRIMARY KEY is the rowid: ids grow with submission, which is the last
    -- tie-breaker of claim order.
    id               INTEGER PRIMARY KEY,
    key              TEXT    NOT NULL,
    task             TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    priority         INTEGER NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN
                       ('queued','running','succeeded','failed','cancelled','dead','interrupted')),
    args             TEXT    NOT NULL,
    result           TEXT,
    error            TEXT,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    recoveries       INTEGER NOT NULL DEFAULT 0,
    fence            INTEGER NOT NULL DEFAULT 0,
    owner            INTEGER,
    lease_expires_at REAL,
    timeout_s        REAL,
    run_at           REAL    NOT NULL,
    created_at       REAL    NOT NULL,
    started_at       REAL,
    finished_at      REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    last_seq         INTEGER NOT NULL DEFAULT 0,
    parent_id        INTEGER,
    wake_requested   INTEGER NOT NULL DEFAULT 0,
    budget           TEXT,
    deadline_at      REAL,
    thread           TEXT,
    interrupt        TEXT,
    tenant           TEXT,
    traceparent      TEXT,
    -- the submitting app's version and its major (NULL: submitted before runs recorded one)
    version          TEXT,
    major            INTEGER,
    -- the seq of the log's `trimmed` marker (0: never trimmed; migration 14)
    trimmed_seq      INTEGER NOT NULL DEFAULT 0,
    -- its place in its thread's order when it went ahead of waiting runs (NULL: its id;
    -- migration 16)
    turn             REAL
);

-- The claim reads due runs of a queue in (priority, run_at, id) order; the partial index
-- holds only queued runs, so it stays small however many ended runs the table keeps.
CREATE INDEX runs_due ON runs (queue, priority, run_at, id) WHERE state = 'queued';
-- Lease renewal, cancel checks and the rescuer look up running runs by owner and expiry.
CREATE INDEX runs_running ON runs (owner, lease_expires_at) WHERE state = 'running';
CREATE INDEX runs_state ON runs (state, id);

CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX runs_deadline ON runs (deadline_at) WHERE deadline_at IS NOT NULL
    AND state IN ('queued', 'running');
-- The summary's latency sample: the latest ended runs, a range of this index.
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;

-- Keyed by (run, position): a second write of a position conflicts instead of doubling.
CREATE TABLE steps (
    run_id     INTEGER NOT NULL,
    position   INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    status     TEXT    NOT NULL CHECK (status IN ('started', 'done', 'failed')),
    result     TEXT,
    error      TEXT,
    fence      INTEGER NOT NULL,
    created_at REAL    NOT NULL,
    PRIMARY KEY (run_id, position)
) WITHOUT ROWID;

CREATE TABLE events (
    run_id INTEGER NOT NULL,
    seq    INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    data   TEXT    NOT NULL,
    at     REAL    NOT NULL,
    -- an emit's place in its run's code, "<position>.<n>" (NULL: not an emit; migration 17)
    mark   TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
-- The emits of a run by place: a replayed emit is found, not appended again.
CREATE INDEX events_mark ON events (run_id, mark) WHERE mark IS NOT NULL;

CREATE INDEX runs_thread ON runs (thread, id) WHERE thread IS NOT NULL;
CREATE INDEX runs_tenant ON runs (tenant, id) WHERE tenant IS NOT NULL;
-- A key names one run within its tenant ('' for runs of no tenant).
CREATE UNIQUE INDEX runs_key ON runs (coalesce(tenant, ''), key);

CREATE TABLE threads (
    id         TEXT NOT NULL,
    created_at REAL NOT NULL,
    deleted_at REAL,
    tenant     TEXT NOT NULL DEFAULT '',
    -- the id of this incarnation's first run (0 until it is inserted; migration 15)
    incarnation INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id)
) WITHOUT ROWID;
-- The tombstones a sweep looks for, oldest first (migration 15).
CREATE INDEX threads_deleted ON threads (deleted_at) WHERE deleted_at IS NOT NULL;

-- A thread's history, in (turn, run, index) order: runs of a thread never overlap, and
-- run ids grow in submission order, but for a run that went ahead of waiting ones (its
-- turn, see runs.turn; NULL: its run id). Keyed so that a replayed append is a no-op.
CREATE TABLE thread_messages (
    thread_id  TEXT    NOT NULL,
    run_id     INTEGER NOT NULL,
    idx        INTEGER NOT NULL,
    message    TEXT    NOT NULL,
    created_at REAL    NOT NULL,
    tenant     TEXT    NOT NULL DEFAULT '',
    turn       REAL,
    PRIMARY KEY (tenant, thread_id, run_id, idx)
) WITHOUT ROWID;

CREATE TABLE workers (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    queues       TEXT    NOT NULL,
    tasks        TEXT    NOT NULL,
    started_at   REAL    NOT NULL,
    heartbeat_at REAL    NOT NULL,
    -- its app's version, and each task with the majors it runs (JSON; NULL: any)
    version      TEXT    NOT NULL DEFAULT '0.0.0',
    majors       TEXT
);

-- Every worker fires due schedules; a fire is a run keyed by the schedule and its
-- fire time, so any number of workers firing it make one run.
CREATE TABLE schedules (
    name           TEXT    PRIMARY KEY,
    cron           TEXT    NOT NULL,
    tz             TEXT    NOT NULL,
    task           TEXT    NOT NULL,
    args           TEXT    NOT NULL,
    queue          TEXT    NOT NULL,
    priority       INTEGER NOT NULL,
    max_attempts   INTEGER NOT NULL,
    misfire        TEXT    NOT NULL CHECK (misfire IN ('skip', 'catch_up')),
    catch_up_limit INTEGER NOT NULL,
    paused         INTEGER NOT NULL DEFAULT 0,
    next_fire_at   REAL    NOT NULL,
    created_at     REAL    NOT NULL,
    updated_at     REAL    NOT NULL
) WITHOUT ROWID;

-- A question a run asked (ctx.ask, or a tool call waiting for approval), keyed by the
-- run and the journal position of the ask, so a replay finds the same row. The answer
-- and who gave it are written once; the run, parked meanwhile, is woken by it.
CREATE TABLE questions (
    run_id      INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    kind        TEXT    NOT NULL CHECK (kind IN ('question', 'approval')),
    body        TEXT    NOT NULL,
    asked_at    REAL    NOT NULL,
    answer      TEXT,
    answered_by TEXT,
    answered_at REAL,
    PRIMARY KEY (run_id, position)
) WITHOUT ROWID;
-- The pending questions, oldest first: what an approver's inbox lists.
CREATE INDEX questions_pending ON questions (asked_at) WHERE answered_at IS NULL;


-- A named lease: one process at a time does what it guards (the retention sweep), and
-- a holder that dies loses it when it lapses.
CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at REAL NOT NULL
);

-- The ranges of run ids reclaimed by retention (a handful: each pass widens one), so
-- that a reader of a reclaimed run is told it expired, not that it never existed.
CREATE TABLE reclaimed (
    lo INTEGER PRIMARY KEY,
    hi INTEGER NOT NULL
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
    tenant    TEXT    NOT NULL,
    thread_id TEXT    NOT NULL,
    tseq      INTEGER NOT NULL,
    run_id    INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    PRIMARY KEY (tenant, thread_id, tseq)
) WITHOUT ROWID;
-- An event is numbered once; how far a run's log is numbered is one probe of this index.
CREATE UNIQUE INDEX thread_events_event ON thread_events (run_id, seq);

-- Token buckets shared by every worker (rate limits per model): a level and when it was
-- stored; what refilled since is reckoned at each take (store/_rules.py, take_from_bucket).
CREATE TABLE rate_buckets (
    name       TEXT PRIMARY KEY,
    tokens     REAL NOT NULL,
    updated_at REAL NOT NULL
) WITHOUT ROWID;

-- The fleet bus: a row per slot of a fleet root (its generation grows across lives; state
-- NULL: the slot is free), the queues paused fleet-wide, and the polled messages.
CREATE TABLE fleet_slots (
    root         TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    ordinal      INTEGER NOT NULL,
    generation   INTEGER NOT NULL,
    state        TEXT    CHECK (state IN ('ready', 'resyncing', 'recycling')),
    host         TEXT,
    pid          INTEGER,
    drain_s      REAL,
    claimed_at   REAL,
    heartbeat_at REAL,
    expires_at   REAL,
    PRIMARY KEY (root, kind, ordinal)
) WITHOUT ROWID;

-- Queues paused fleet-wide: no worker of the root claims from them, including workers
-- started later (they read this at boot).
CREATE TABLE fleet_paused_queues (
    root      TEXT NOT NULL,
    queue     TEXT NOT NULL,
    paused_at REAL NOT NULL,
    PRIMARY KEY (root, queue)
) WITHOUT ROWID;

-- SQLite has no notification between processes: fleet messages are rows that every
-- process of the machine polls for, after the last id it read; old ones are pruned.
CREATE TABLE fleet_messages (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    root    TEXT NOT NULL,
    body    TEXT NOT NULL,
    sent_at REAL NOT NULL
);
