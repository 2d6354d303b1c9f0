-- Schema 22: events awaited by key (ctx.wait_event, app.publish_event).

-- A run's wait for an event, registered (fenced) under its journal position before it
-- waits, so a replay finds the same one. A publish of `name` in `tenant` ('' = no tenant)
-- whose data fits `match_json` delivers to it while it is `waiting`, as a signal of the
-- run, and marks it `delivered` (`event_id`); a wait whose timeout passed is `closed`.
CREATE TABLE event_waits (
    run_id        bigint  NOT NULL,
    position      integer NOT NULL,
    tenant        text    NOT NULL,
    name          text    NOT NULL,
    match_json    text    NOT NULL,
    registered_at double precision NOT NULL,
    state         text    NOT NULL,
    event_id      text,
    PRIMARY KEY (run_id, position)
);
-- What a publish reads: the waiting registrations of its tenant and name.
CREATE INDEX event_waits_waiting ON event_waits (tenant, name, run_id) WHERE state = 'waiting';

-- A published event, kept by its id within its tenant: published again, it delivers
-- nothing again (the runs it woke and could not deliver to are its first publish's).
CREATE TABLE published_events (
    tenant       text NOT NULL,
    id           text NOT NULL,
    name         text NOT NULL,
    data         text NOT NULL,
    published_at double precision NOT NULL,
    published_by text,
    woken        text NOT NULL,
    full_runs    text NOT NULL,
    PRIMARY KEY (tenant, id)
);
-- What retention forgets first: the ids published longest ago.
CREATE INDEX published_events_at ON published_events (published_at);
