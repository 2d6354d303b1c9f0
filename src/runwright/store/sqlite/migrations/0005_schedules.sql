-- Schema 5: schedules. Every worker fires due schedules; a fire is a run keyed by the
-- schedule and its fire time, so any number of workers firing it make one run.

CREATE TABLE schedules (
    name           TEXT    PRIMARY KEY,
    cron           TEXT    NOT NULL,
    tz             TEXT    NOT NULL,
    task           TEXT    NOT NULL,
    args           TEXT    NOT NULL,
    queue          TEXT    NOT NULL,
    priority       INTEGER NOT NULL,
    max_attempts   INTEGER NOT NULL,
    misfire        TEXT    NOT NULL CHECK (misfire IN ('skip', 'catch_up')),
    catch_up_limit INTEGER NOT NULL,
    paused         INTEGER NOT NULL DEFAULT 0,
    next_fire_at   REAL    NOT NULL,
    created_at     REAL    NOT NULL,
    updated_at     REAL    NOT NULL
) WITHOUT ROWID;
