-- Schema 4: threads (conversations whose history persists across runs).

-- The thread a run belongs to; runs of one thread never overlap (the claim skips a run
-- while an earlier run of its thread is open).
ALTER TABLE runs ADD COLUMN thread text;
-- 'interrupt' or 'rollback' when a newer submission asked this run to stop at its next
-- step boundary.
ALTER TABLE runs ADD COLUMN interrupt text;
CREATE INDEX runs_thread ON runs (thread, id) WHERE thread IS NOT NULL;

CREATE TABLE threads (
    id         text PRIMARY KEY,
    created_at double precision NOT NULL,
    deleted_at double precision
);

-- A thread's history, in (run, index) order: runs of a thread never overlap, and run
-- ids grow in submission order. Keyed so that a replayed append is a no-op.
CREATE TABLE thread_messages (
    thread_id  text    NOT NULL,
    run_id     bigint  NOT NULL,
    idx        integer NOT NULL,
    message    text    NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (thread_id, run_id, idx)
);
