-- Schema 23: forks (RunHandle.fork). A fork is a new run whose journal began as a copy of
-- another run's first steps: `forked_from` names that run, and the index lists a run's
-- forks (app.list_runs(forked_from=)). Nullable without a default: adding it rewrites
-- nothing, and the partial index holds forks only.
ALTER TABLE runs ADD COLUMN forked_from bigint;
CREATE INDEX runs_forked_from ON runs (forked_from) WHERE forked_from IS NOT NULL;
