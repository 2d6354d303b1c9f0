-- Schema 22: pausing a run (app.pause, app.resume; a retry policy's on_exhausted="pause").
-- A paused run is queued and not due: `waiting` = 'paused' and `run_at` far in the
-- future (runs.PAUSED_RUN_AT), so no claim, due count or unrunnable sweep sees it.
-- `pause_requested`: a running run is asked to stop at its next step boundary (as a
-- cancel is asked), and an attempt's end that would requeue it pauses it instead.
-- `held_run_at`: the due time a queued run had when it was paused, which a resume of a
-- run that never started gives back (a run that did start replays and waits again for
-- what is still due).
ALTER TABLE runs ADD COLUMN pause_requested INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN held_run_at REAL;
