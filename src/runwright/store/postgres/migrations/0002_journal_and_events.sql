-- Schema 2: the step journal, the per-run event log, child runs.

-- The last event number of the run: appends bump it in the statement that locks the
-- run's row, so the log is gapless and a superseded owner cannot append.
ALTER TABLE runs ADD COLUMN last_seq integer NOT NULL DEFAULT 0;
-- A child run started by ctx.submit; a child that ends wakes its parked parent.
ALTER TABLE runs ADD COLUMN parent_id bigint;
-- Set when a child ends while its parent is still running: the parent's park then
-- wakes at once instead of missing the news.
ALTER TABLE runs ADD COLUMN wake_requested boolean NOT NULL DEFAULT false;
CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;

-- Keyed by (run, position): a second write of a position conflicts instead of doubling.
CREATE TABLE steps (
    run_id     bigint  NOT NULL,
    position   integer NOT NULL,
    name       text    NOT NULL,
    status     text    NOT NULL CHECK (status IN ('done', 'failed')),
    result     text,
    error      text,
    fence      bigint  NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (run_id, position)
);

CREATE TABLE events (
    run_id bigint  NOT NULL,
    seq    integer NOT NULL,
    kind   text    NOT NULL,
    data   text    NOT NULL,
    at     double precision NOT NULL,
    PRIMARY KEY (run_id, seq)
);
