-- Schema 29: rates per key (tasks._rates, store._rate_rules). One row per start of a run
-- under a rate: its key ("<name>:<key>"), when its window ends (the start plus per_s), its
-- cost and its run. The limited claim sums a key's rows with `until` past now under its
-- advisory lock, and writes the rows of the runs it starts in the same transaction; rows
-- whose window ended are deleted by the claims that write. Runs without rates never read it.
CREATE TABLE rate_spent (
    slot   text NOT NULL,
    until  double precision NOT NULL,
    run_id bigint NOT NULL,
    cost   double precision NOT NULL,
    PRIMARY KEY (slot, until, run_id)
);
CREATE INDEX rate_spent_until ON rate_spent (until);
