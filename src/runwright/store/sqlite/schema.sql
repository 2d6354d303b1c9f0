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
    turn             REAL,
    -- what it waits on while queued and not yet due (runs.WaitReason; migration 18)
    waiting          TEXT,
    -- the run it was forked from (RunHandle.fork; migration 21)
    forked_from      INTEGER,
    -- a stop at the next step boundary that pauses it, and the due time a paused run
    -- had when it was paused (migration 22)
    pause_requested  INTEGER NOT NULL DEFAULT 0,
    held_run_at      REAL,
    -- its concurrency limits, JSON [[name, key, max], ...] (NULL: none; migration 23)
    limits           TEXT
);

-- The claim reads due runs of a queue in (priority, run_at, id) order; the partial index
-- holds only queued runs, so it stays small however many ended runs the table keeps.
CREATE INDEX runs_due ON runs (queue, priority, run_at, id) WHERE state = 'queued';
-- Lease renewal, cancel checks and the rescuer look up running runs by owner and expiry.
CREATE INDEX runs_running ON runs (owner, lease_expires_at) WHERE state = 'running';
CREATE INDEX runs_state ON runs (state, id);

CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;
-- A run's forks (migration 21).
CREATE INDEX runs_forked_from ON runs (forked_from) WHERE forked_from IS NOT NULL;
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

-- A signal sent to a run (run.signal, signal-with-start), numbered per run in the order
-- sent. Pending until a wait of the run takes it: `position` is then the journal position
-- of that wait (one signal per position), so a replay finds the same one. `key` makes a
-- send idempotent: one signal per key of a run. A pending signal its sender withdrew (an
-- update given up on) is kept, marked, and never taken.
CREATE TABLE signals (
    run_id   INTEGER NOT NULL,
    seq      INTEGER NOT NULL,
    name     TEXT    NOT NULL,
    payload  TEXT    NOT NULL,
    sent_at  REAL    NOT NULL,
    key      TEXT,
    sent_by  TEXT,
    position INTEGER,
    taken_at REAL,
    withdrawn_at REAL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX signals_key ON signals (run_id, key) WHERE key IS NOT NULL;
CREATE UNIQUE INDEX signals_position ON signals (run_id, position) WHERE position IS NOT NULL;
-- What a wait takes: the oldest pending signal of a name.
CREATE INDEX signals_pending ON signals (run_id, name, seq) WHERE position IS NULL AND withdrawn_at IS NULL;


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

-- A run's wait for an event, registered (fenced) under its journal position before it
-- waits, so a replay finds the same one. A publish of `name` in `tenant` ('' = no tenant)
-- whose data fits `match_json` delivers to it while it is `waiting`, as a signal of the
-- run, and marks it `delivered` (`event_id`); a wait whose timeout passed is `closed`.
CREATE TABLE event_waits (
    run_id        INTEGER NOT NULL,
    position      INTEGER NOT NULL,
    tenant        TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    match_json    TEXT    NOT NULL,
    registered_at REAL    NOT NULL,
    state         TEXT    NOT NULL,
    event_id      TEXT,
    PRIMARY KEY (run_id, position)
) WITHOUT ROWID;
-- What a publish reads: the waiting registrations of its tenant and name.
CREATE INDEX event_waits_waiting ON event_waits (tenant, name, run_id) WHERE state = 'waiting';

-- A published event, kept by its id within its tenant: published again, it delivers
-- nothing again (the runs it woke and could not deliver to are its first publish's).
CREATE TABLE published_events (
    tenant       TEXT NOT NULL,
    id           TEXT NOT NULL,
    name         TEXT NOT NULL,
    data         TEXT NOT NULL,
    published_at REAL NOT NULL,
    published_by TEXT,
    woken        TEXT NOT NULL,
    full_runs    TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
) WITHOUT ROWID;
-- What retention forgets first: the ids published longest ago.
CREATE INDEX published_events_at ON published_events (published_at);

-- Concurrency limits per key (migration 23): the limited claim counts running runs by
-- the limits of runs_limited_running and walks runs_limited_due; neither holds a run
-- without limits.
CREATE INDEX runs_limited_running ON runs (id) WHERE state = 'running' AND limits IS NOT NULL;
CREATE INDEX runs_limited_due ON runs (queue, priority, run_at, id)
    WHERE state = 'queued' AND limits IS NOT NULL;
-- An operator's max for a limit ("<name>") or one key of it ("<name>:<key>").
CREATE TABLE limit_overrides (
    target TEXT PRIMARY KEY,
    max    INTEGER NOT NULL
);
-- Flow control per key at submission (migration 24): a key's latest run and its due time.
CREATE TABLE flow_keys (
    slot   TEXT PRIMARY KEY,
    run_id INTEGER,
    at     REAL
);
-- The claim of runs without limits walks only those (migration 25): a backlog of limited
-- runs held behind a full key is never stepped over by it.
CREATE INDEX runs_free_due ON runs (queue, priority, run_at, id)
    WHERE state = 'queued' AND limits IS NULL;
-- A limited claim that holds a full key back reads each other key's first runs along it.
CREATE INDEX runs_limited_keys ON runs (limits, priority, run_at, id)
    WHERE state = 'queued' AND limits IS NOT NULL;
-- When a worker's next limited run comes due, its due ones held back by their keys.
CREATE INDEX runs_limited_at ON runs (queue, run_at)
    WHERE state = 'queued' AND limits IS NOT NULL;
-- Rates per key (migration 26): one row per start under a rate, until its window ends.
CREATE TABLE rate_spent (
    slot   TEXT NOT NULL,
    until  REAL NOT NULL,
    run_id INTEGER NOT NULL,
    cost   REAL NOT NULL,
    PRIMARY KEY (slot, until, run_id)
);
CREATE INDEX rate_spent_until ON rate_spent (until);
