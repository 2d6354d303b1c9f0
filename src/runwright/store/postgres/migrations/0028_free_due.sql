-- Schema 28: the claim of runs without concurrency limits walks only those runs. runs_due
-- holds every queued run; a backlog of limited runs held behind their full key (20,000
-- of one tenant, say) sat at its head, and every claim stepped over all of it, row by row,
-- before the first run it could take: each claim cost O(backlog), and a small tenant's
-- run waited 25x longer than alone. runs_due stays for what reads every queued run (the
-- next due time, counts by task and kind).
CREATE INDEX runs_free_due ON runs (queue, priority, run_at, id)
    WHERE state = 'queued' AND limits IS NULL;
-- A limited claim that holds a full key back reads the first runs of each other key
-- (store._limit_rules.heads) along this index, and the distinct keys by a loose scan of
-- it, instead of stepping over the full key's backlog in claim order.
CREATE INDEX runs_limited_keys ON runs (limits, priority, run_at, id)
    WHERE state = 'queued' AND limits IS NOT NULL;
-- A worker whose due limited runs are all held back by their keys asks when the next
-- limited run comes due (sql.NEXT_DUE_LIMITED): a seek past now on this index, not a read
-- of the held backlog (a min over 20,000 due runs, at every idle of every worker).
CREATE INDEX runs_limited_at ON runs (queue, run_at)
    WHERE state = 'queued' AND limits IS NOT NULL;
