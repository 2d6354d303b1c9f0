-- Schema 27: flow control per key at submission (tasks._flow: singleton, throttle,
-- debounce). One row per key of a declaration ("<kind>:<name>:<key>"): the key's latest
-- run and the due time it was given. A submission of a run that carries one locks the
-- row (FOR UPDATE), decides (store._flow_rules) and writes in the same transaction, so
-- submitters of one key take turns. Runs without flow control never read it.
CREATE TABLE flow_keys (
    slot   text PRIMARY KEY,
    run_id bigint,
    at     double precision
);
