-- Schema 5: schedules. Every worker fires due schedules; a fire is a run keyed by the
-- schedule and its fire time, so any number of workers firing it make one run.

CREATE TABLE schedules (
    name           text    PRIMARY KEY,
    cron           text    NOT NULL,
    tz             text    NOT NULL,
    task           text    NOT NULL,
    args           text    NOT NULL,
    queue          text    NOT NULL,
    priority       integer NOT NULL,
    max_attempts   integer NOT NULL,
    misfire        text    NOT NULL CHECK (misfire IN ('skip', 'catch_up')),
    catch_up_limit integer NOT NULL,
    paused         boolean NOT NULL DEFAULT false,
    next_fire_at   double precision NOT NULL,
    created_at     double precision NOT NULL,
    updated_at     double precision NOT NULL
);
