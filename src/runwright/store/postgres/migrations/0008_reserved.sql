-- Schema 8: reserved for a change made on another line of work; empty here, so that
-- the numbers stay 1..n without a gap.
SELECT 1;
