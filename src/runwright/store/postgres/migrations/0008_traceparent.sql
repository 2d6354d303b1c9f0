-- Schema 8: the W3C traceparent given at submission. Every attempt of the run continues
-- that trace; NULL means the run starts a trace of its own (derived from its identity).
-- A nullable column without a default: adding it rewrites nothing.
ALTER TABLE runs ADD COLUMN traceparent text;
