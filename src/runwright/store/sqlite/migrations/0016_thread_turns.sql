-- Schema 16: a run may go ahead of runs already waiting on its thread (on_busy interrupt
-- or rollback: the new message runs next, the waiting ones after it, in order). `turn`
-- is such a run's place in its thread's order; NULL, as for every other run, is its id.
-- A thread's runs are claimed, and its messages read as history, in (turn, id) order;
-- thread_messages keeps its run's turn so that the history keeps that order once the
-- run itself is reclaimed.
ALTER TABLE runs ADD COLUMN turn REAL;
ALTER TABLE thread_messages ADD COLUMN turn REAL;
