-- Schema 20: events awaited by key (ctx.wait_event, app.publish_event).

-- A run's wait for an event, registered (fenced) under its journal position before it
-- waits, so a replay finds the same one. A publish of `name` in `tenant` ('' = no tenant)
-- whose data fits `match_json` delivers to it while it is `waiting`, as a signal of the
-- run, and marks it `delivered` (`event_id`); a wait whose timeout passed is `closed`.
CREATE TABLE event_waits (
    run_id        INTEGER NOT NULL,
    position      INTEGER NOT NULL,
    tenant        TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    match_json    TEXT    NOT NULL,
    registered_at REAL    NOT NULL,
    state         TEXT    NOT NULL,
    event_id      TEXT,
    PRIMARY KEY (run_id, position)
) WITHOUT ROWID;
-- What a publish reads: the waiting registrations of its tenant and name.
CREATE INDEX event_waits_waiting ON event_waits (tenant, name, run_id) WHERE state = 'waiting';

-- A published event, kept by its id within its tenant: published again, it delivers
-- nothing again (the runs it woke and could not deliver to are its first publish's).
CREATE TABLE published_events (
    tenant       TEXT NOT NULL,
    id           TEXT NOT NULL,
    name         TEXT NOT NULL,
    data         TEXT NOT NULL,
    published_at REAL NOT NULL,
    published_by TEXT,
    woken        TEXT NOT NULL,
    full_runs    TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
) WITHOUT ROWID;
-- What retention forgets first: the ids published longest ago.
CREATE INDEX published_events_at ON published_events (published_at);
