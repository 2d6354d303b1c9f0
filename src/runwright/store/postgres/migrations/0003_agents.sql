-- Schema 3: at-most-once tool calls (a journaled "started" mark) and run budgets.

ALTER TABLE steps DROP CONSTRAINT steps_status_check;
ALTER TABLE steps ADD CONSTRAINT steps_status_check CHECK (status IN ('started', 'done', 'failed'));

-- A run's budget (JSON: max_cost_usd, deadline_s, max_turns) and its deadline, which
-- every worker's rescuer enforces even when the run's own worker is dead.
ALTER TABLE runs ADD COLUMN budget text;
ALTER TABLE runs ADD COLUMN deadline_at double precision;
CREATE INDEX runs_deadline ON runs (deadline_at) WHERE deadline_at IS NOT NULL
    AND state IN ('queued', 'running');
