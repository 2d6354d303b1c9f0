-- Schema 23: concurrency limits per key (tasks._concurrency). A run of a task that
-- declares limits carries them, JSON [[name, key, max], ...] computed at its submission;
-- NULL for every other run (nullable without a default: adding it rewrites nothing).
ALTER TABLE runs ADD COLUMN limits TEXT;
-- A limited claim counts the runs running under each key from the limits of the limited
-- runs running now (never a counter kept apart, which could drift from the states), and
-- walks the due limited runs in claim order: two partial indexes that hold no row of a
-- run without limits, so runs without limits pay nothing for them.
CREATE INDEX runs_limited_running ON runs (id) WHERE state = 'running' AND limits IS NOT NULL;
CREATE INDEX runs_limited_due ON runs (queue, priority, run_at, id)
    WHERE state = 'queued' AND limits IS NOT NULL;
-- An operator's max for a limit ("<name>") or one key of it ("<name>:<key>"), read by
-- every limited claim: a change takes effect at the next claim.
CREATE TABLE limit_overrides (
    target TEXT PRIMARY KEY,
    max    INTEGER NOT NULL
);
