-- Schema 16: a run's key is indexed in a table of its own, run_keys, not on runs. Every
-- run has a key (a random one when the submitter gave none, so a retried submission
-- dedupes), and no update of a run is HOT (a claim or a finish changes `state`, which
-- indexes hold), so a unique index on runs took a new entry at every claim and every
-- finish, at a random place in a large index. A key is written once, at submission, and
-- removed with its run. runs.key stays: reads of a run need no join.
CREATE TABLE run_keys (
    tenant text   NOT NULL,
    key    text   NOT NULL,
    run_id bigint NOT NULL,
    PRIMARY KEY (tenant, key)
);
INSERT INTO run_keys (tenant, key, run_id) SELECT coalesce(tenant, ''), key, id FROM runs;
DROP INDEX runs_key;
