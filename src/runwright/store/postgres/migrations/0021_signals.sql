-- Schema 21: signals, messages sent to a live run that it takes when it waits.

-- A signal sent to a run (run.signal, signal-with-start), numbered per run in the order
-- sent. Pending until a wait of the run takes it: `position` is then the journal position
-- of that wait (one signal per position), so a replay finds the same one. `key` makes a
-- send idempotent: one signal per key of a run. A pending signal its sender withdrew (an
-- update given up on) is kept, marked, and never taken.
CREATE TABLE signals (
    run_id   bigint  NOT NULL,
    seq      bigint  NOT NULL,
    name     text    NOT NULL,
    payload  text    NOT NULL,
    sent_at  double precision NOT NULL,
    key      text,
    sent_by  text,
    position integer,
    taken_at double precision,
    withdrawn_at double precision,
    PRIMARY KEY (run_id, seq)
);
CREATE UNIQUE INDEX signals_key ON signals (run_id, key) WHERE key IS NOT NULL;
CREATE UNIQUE INDEX signals_position ON signals (run_id, position) WHERE position IS NOT NULL;
-- What a wait takes: the oldest pending signal of a name.
CREATE INDEX signals_pending ON signals (run_id, name, seq) WHERE position IS NULL AND withdrawn_at IS NULL;
