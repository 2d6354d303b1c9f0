-- Schema 14: retention trims a run's log to its last max_events events. trimmed_seq is
-- the seq of the `trimmed` marker that stands in for everything before it (0: the log
-- was never trimmed), so that finding runs whose log outgrew the bound reads two
-- columns of runs and never counts events.
ALTER TABLE runs ADD COLUMN trimmed_seq INTEGER NOT NULL DEFAULT 0;
