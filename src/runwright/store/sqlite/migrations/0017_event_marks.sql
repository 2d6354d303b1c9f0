-- Schema 17: a run's `ctx.emit` is part of its history, appended once however often its
-- code is replayed. `mark` is the emit's place in the run's code ("<position>.<n>": the
-- n-th emit before journal position <position>); an emit whose mark and kind the log
-- holds already is not appended again (its first seq is returned). NULL for every other
-- event. The index holds marked events only.
ALTER TABLE events ADD COLUMN mark TEXT;
CREATE INDEX events_mark ON events (run_id, mark) WHERE mark IS NOT NULL;
