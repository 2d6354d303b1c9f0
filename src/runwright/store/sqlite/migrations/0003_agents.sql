-- Schema 3: at-most-once tool calls (a journaled "started" mark) and run budgets.

-- SQLite cannot change a CHECK constraint in place: the journal is rebuilt with
-- 'started' allowed, keeping every entry.
CREATE TABLE steps_v3 (
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
INSERT INTO steps_v3 SELECT * FROM steps;
DROP TABLE steps;
ALTER TABLE steps_v3 RENAME TO steps;

-- A run's budget (JSON: max_cost_usd, deadline_s, max_turns) and its deadline, which
-- every worker's rescuer enforces even when the run's own worker is dead.
ALTER TABLE runs ADD COLUMN budget TEXT;
ALTER TABLE runs ADD COLUMN deadline_at REAL;
CREATE INDEX runs_deadline ON runs (deadline_at) WHERE deadline_at IS NOT NULL
    AND state IN ('queued', 'running');
