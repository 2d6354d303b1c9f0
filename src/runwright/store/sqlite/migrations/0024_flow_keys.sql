-- Schema 24: flow control per key at submission (tasks._flow: singleton, throttle,
-- debounce). One row per key of a declaration ("<kind>:<name>:<key>"): the key's latest
-- run and the due time it was given. A submission of a run that carries one takes the
-- row's lock (SQLite: the write lock of its transaction), decides (store._flow_rules)
-- and writes in the same transaction. Runs without flow control never read it.
CREATE TABLE flow_keys (
    slot   TEXT PRIMARY KEY,
    run_id INTEGER,
    at     REAL
);
