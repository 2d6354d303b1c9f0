-- Schema 9: questions runs ask a person, and their answers.

-- A question a run asked (ctx.ask, or a tool call waiting for approval), keyed by the
-- run and the journal position of the ask, so a replay finds the same row. The answer
-- and who gave it are written once; the run, parked meanwhile, is woken by it.
CREATE TABLE questions (
    run_id      bigint  NOT NULL,
    position    integer NOT NULL,
    kind        text    NOT NULL CHECK (kind IN ('question', 'approval')),
    body        text    NOT NULL,
    asked_at    double precision NOT NULL,
    answer      text,
    answered_by text,
    answered_at double precision,
    PRIMARY KEY (run_id, position)
);
-- The pending questions, oldest first: what an approver's inbox lists.
CREATE INDEX questions_pending ON questions (asked_at) WHERE answered_at IS NULL;
