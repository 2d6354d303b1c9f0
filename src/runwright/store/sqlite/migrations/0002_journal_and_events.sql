-- Schema 2: the step journal, the per-run event log, child runs.

-- The last event number of the run: appends bump it in the same transaction that holds
-- the run's write lock, so the log is gapless and a superseded owner cannot append.
ALTER TABLE runs ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0;
-- A child run started by ctx.submit; a child that ends wakes its parked parent.
ALTER TABLE runs ADD COLUMN parent_id INTEGER;
-- Set when a child ends while its parent is still running: the parent's park then
-- wakes at once instead of missing the news.
ALTER TABLE runs ADD COLUMN wake_requested INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;

-- Keyed by (run, position): a second write of a position conflicts instead of doubling.
CREATE TABLE steps (
    run_id     INTEGER NOT NULL,
    position   INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    status     TEXT    NOT NULL CHECK (status IN ('done', 'failed')),
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
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
