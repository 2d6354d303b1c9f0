-- Schema 8: the W3C traceparent given at submission. Every attempt of the run continues
-- that trace; NULL means the run starts a trace of its own (derived from its identity).
-- A nullable column without a default: adding it rewrites nothing.
ALTER TABLE runs ADD COLUMN traceparent text;

-- The summary's latency sample reads the latest ended runs: a range of this index, never
-- a scan of every run the table keeps. Partial: open runs (no finished_at) stay out.
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
