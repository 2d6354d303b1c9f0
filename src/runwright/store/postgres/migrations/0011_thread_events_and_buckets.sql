-- Schema 11: a thread's events as one log, and the token buckets of rate limits.
--
-- A thread's events as one log, numbered per thread (tseq 1, 2, 3 ...), so
-- that a follower of the thread resumes from one number.
--
-- The numbers are given when the thread is read (`thread_event_list` numbers what is not
-- numbered yet, under the thread's lock), not when an event is appended: the append
-- paths stay as they were (no trigger, no thread lock on the hot path), and a thread that
-- nobody follows costs nothing. A run's seqs are gapless, so numbering its new events is
-- one INSERT ... SELECT; the next tseq is max(tseq) + 1 (one probe of the key).
CREATE TABLE thread_events (
    tenant    text    NOT NULL,
    thread_id text    NOT NULL,
    tseq      bigint  NOT NULL,
    run_id    bigint  NOT NULL,
    seq       integer NOT NULL,
    PRIMARY KEY (tenant, thread_id, tseq)
);
-- An event is numbered once; how far a run's log is numbered is one probe of this index.
CREATE UNIQUE INDEX thread_events_event ON thread_events (run_id, seq);

-- Token buckets shared by every worker (rate limits per model): a level and when it was
-- stored; what refilled since is reckoned at each take (store/_rules.py, take_from_bucket).
CREATE TABLE rate_buckets (
    name       text PRIMARY KEY,
    tokens     double precision NOT NULL,
    updated_at double precision NOT NULL
);
