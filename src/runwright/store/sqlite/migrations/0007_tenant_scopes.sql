-- Schema 7: a tenant's keys and thread names are its own, scoped by column (never by
-- joining strings, which two tenants could collide in). A run with no tenant belongs
-- to the deployment itself; '' stands for "no tenant" where a key column needs a value.
-- SQLite cannot drop a UNIQUE constraint or change a primary key in place: the three
-- tables are rebuilt (create, copy, drop, rename), and the runs indexes made again.

CREATE TABLE runs_new (
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
    tenant           TEXT);
INSERT INTO runs_new SELECT * FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_due ON runs (queue, priority, run_at, id) WHERE state = 'queued';
CREATE INDEX runs_running ON runs (owner, lease_expires_at) WHERE state = 'running';
CREATE INDEX runs_state ON runs (state, id);
CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX runs_deadline ON runs (deadline_at) WHERE deadline_at IS NOT NULL
    AND state IN ('queued', 'running');
CREATE INDEX runs_thread ON runs (thread, id) WHERE thread IS NOT NULL;
CREATE INDEX runs_tenant ON runs (tenant, id) WHERE tenant IS NOT NULL;
CREATE UNIQUE INDEX runs_key ON runs (coalesce(tenant, ''), key);

CREATE TABLE threads_new (
    id         TEXT NOT NULL,
    created_at REAL NOT NULL,
    deleted_at REAL,
    tenant     TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, id)
) WITHOUT ROWID;
INSERT INTO threads_new (id, created_at, deleted_at) SELECT id, created_at, deleted_at FROM threads;
DROP TABLE threads;
ALTER TABLE threads_new RENAME TO threads;

CREATE TABLE thread_messages_new (
    thread_id  TEXT    NOT NULL,
    run_id     INTEGER NOT NULL,
    idx        INTEGER NOT NULL,
    message    TEXT    NOT NULL,
    created_at REAL    NOT NULL,
    tenant     TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, thread_id, run_id, idx)
) WITHOUT ROWID;
INSERT INTO thread_messages_new (thread_id, run_id, idx, message, created_at)
    SELECT thread_id, run_id, idx, message, created_at FROM thread_messages;
DROP TABLE thread_messages;
ALTER TABLE thread_messages_new RENAME TO thread_messages;
