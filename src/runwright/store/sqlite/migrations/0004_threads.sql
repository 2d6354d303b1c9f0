-- Schema 4: threads (conversations whose history persists across runs).

-- The thread a run belongs to; runs of one thread never overlap (the claim skips a run
-- while an earlier run of its thread is open).
ALTER TABLE runs ADD COLUMN thread TEXT;
-- 'interrupt' or 'rollback' when a newer submission asked this run to stop at its next
-- step boundary.
ALTER TABLE runs ADD COLUMN interrupt TEXT;
CREATE INDEX runs_thread ON runs (thread, id) WHERE thread IS NOT NULL;

CREATE TABLE threads (
    id         TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    deleted_at REAL
) WITHOUT ROWID;

-- A thread's history, in (run, index) order: runs of a thread never overlap, and run
-- ids grow in submission order. Keyed so that a replayed append is a no-op.
CREATE TABLE thread_messages (
    thread_id  TEXT    NOT NULL,
    run_id     INTEGER NOT NULL,
    idx        INTEGER NOT NULL,
    message    TEXT    NOT NULL,
    created_at REAL    NOT NULL,
    PRIMARY KEY (thread_id, run_id, idx)
) WITHOUT ROWID;
