-- Schema 20: why a queued run is not running, as the attempt that gave its slot back
-- said (a park on a timer, a person's answer, children or a rate limit; a retry's backoff:
-- runs.WaitReason), kept while it waits, so lists show it and filter by it. The fenced
-- end of an attempt writes it; it holds while the run is queued and not yet due.
-- Nullable without a default: adding it rewrites nothing.
ALTER TABLE runs ADD COLUMN waiting text;
