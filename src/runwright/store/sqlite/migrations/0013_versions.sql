-- Schema 13: upgrades and heterogeneous pools. A run records the version of the app that
-- submitted it (and its major, which the claim matches against what the worker's tasks can
-- run); NULL for the runs submitted before: any worker that registers their task runs them.
-- A worker records its app's version and the majors of each of its tasks, so that any
-- worker can tell whether a due run is runnable by someone alive.
-- Nullable columns without a default (or with a constant one): adding them rewrites nothing.
ALTER TABLE runs ADD COLUMN version TEXT;
ALTER TABLE runs ADD COLUMN major INTEGER;
ALTER TABLE workers ADD COLUMN version TEXT NOT NULL DEFAULT '0.0.0';
ALTER TABLE workers ADD COLUMN majors TEXT;
