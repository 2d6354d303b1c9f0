-- The current runwright schema on PostgreSQL, whole. A new migration changes this file too;
-- the drift test checks that the numbered migrations build exactly this.

CREATE TABLE runs (
    -- identity ids grow with submission: the last tie-breaker of claim order.
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key              text    NOT NULL,
    task             text    NOT NULL,
    queue            text    NOT NULL,
    priority         smallint NOT NULL,
    state            text    NOT NULL CHECK (state IN
                       ('queued','running','succeeded','failed','cancelled','dead','interrupted')),
    args             text    NOT NULL,
    result           text,
    error            text,
    attempt          integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL,
    recoveries       integer NOT NULL DEFAULT 0,
    fence            bigint  NOT NULL DEFAULT 0,
    owner            bigint,
    lease_expires_at double precision,
    timeout_s        double precision,
    run_at           double precision NOT NULL,
    created_at       double precision NOT NULL,
    started_at       double precision,
    finished_at      double precision,
    cancel_requested boolean NOT NULL DEFAULT false,
    last_seq         integer NOT NULL DEFAULT 0,
    parent_id        bigint,
    wake_requested   boolean NOT NULL DEFAULT false,
    budget           text,
    deadline_at      double precision,
    thread           text,
    interrupt        text,
    tenant           text,
    traceparent      text,
    -- the submitting app's version and its major (NULL: submitted before runs recorded one)
    version          text,
    major            integer,
    -- the seq of the log's `trimmed` marker (0: never trimmed; migration 14)
    trimmed_seq      integer NOT NULL DEFAULT 0,
    -- its place in its thread's order when it went ahead of waiting runs (NULL: its id;
    -- migration 18)
    turn             double precision,
    -- what it waits on while queued and not yet due (runs.WaitReason; migration 20)
    waiting          text,
    -- the run it was forked from (RunHandle.fork; migration 23)
    forked_from      bigint,
    -- a stop at the next step boundary that pauses it, and the due time a paused run
    -- had when it was paused (migration 24)
    pause_requested  boolean NOT NULL DEFAULT false,
    held_run_at      double precision,
    -- the wait that lingers in its slot for a signal, which a send delivers into
    -- (migration 25: see signal_keep)
    lingering        jsonb,
    -- its concurrency limits, JSON [[name, key, max], ...] (NULL: none; migration 26)
    limits           text
);

-- The claim reads due runs of a queue in (priority, run_at, id) order; the partial index
-- holds only queued runs, so it stays small however many ended runs the table keeps.
CREATE INDEX runs_due ON runs (queue, priority, run_at, id) WHERE state = 'queued';
-- Lease renewal, cancel checks and the rescuer look up running runs by owner and expiry.
CREATE INDEX runs_running ON runs (owner, lease_expires_at) WHERE state = 'running';
-- Not running and succeeded runs: see runs_running, and the primary key (migration 17).
CREATE INDEX runs_state ON runs (state, id) WHERE state NOT IN ('running', 'succeeded');

CREATE INDEX runs_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;
-- A run's forks (migration 23).
CREATE INDEX runs_forked_from ON runs (forked_from) WHERE forked_from IS NOT NULL;
CREATE INDEX runs_deadline ON runs (deadline_at) WHERE deadline_at IS NOT NULL
    AND state IN ('queued', 'running');
-- The summary's latency sample: the latest ended runs, a range of this index.
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;

-- Keyed by (run, position): a second write of a position conflicts instead of doubling.
CREATE TABLE steps (
    run_id     bigint  NOT NULL,
    position   integer NOT NULL,
    name       text    NOT NULL,
    status     text    NOT NULL CHECK (status IN ('started', 'done', 'failed')),
    result     text,
    error      text,
    fence      bigint  NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (run_id, position)
);

CREATE TABLE events (
    run_id bigint  NOT NULL,
    seq    integer NOT NULL,
    kind   text    NOT NULL,
    data   text    NOT NULL,
    at     double precision NOT NULL,
    -- an emit's place in its run's code, "<position>.<n>" (NULL: not an emit; migration 19)
    mark   text,
    PRIMARY KEY (run_id, seq)
);
-- The emits of a run by place: a replayed emit is found, not appended again.
CREATE INDEX events_mark ON events (run_id, mark) WHERE mark IS NOT NULL;

CREATE INDEX runs_thread ON runs (thread, id) WHERE thread IS NOT NULL;
CREATE INDEX runs_tenant ON runs (tenant, id) WHERE tenant IS NOT NULL;
-- A key names one run within its tenant ('' for runs of no tenant). Indexed beside runs,
-- not on it: a key is written once, while every claim and finish of a run (never HOT)
-- would add an entry to an index on runs (migration 16).
CREATE TABLE run_keys (
    tenant text   NOT NULL,
    key    text   NOT NULL,
    run_id bigint NOT NULL,
    PRIMARY KEY (tenant, key)
);

CREATE TABLE threads (
    id         text NOT NULL,
    created_at double precision NOT NULL,
    deleted_at double precision,
    tenant     text NOT NULL DEFAULT '',
    -- the id of this incarnation's first run (0 until it is inserted; migration 15)
    incarnation bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id)
);
-- The tombstones a sweep looks for, oldest first (migration 15).
CREATE INDEX threads_deleted ON threads (deleted_at) WHERE deleted_at IS NOT NULL;

-- A thread's history, in (turn, run, index) order: runs of a thread never overlap, and
-- run ids grow in submission order, but for a run that went ahead of waiting ones (its
-- turn, see runs.turn; NULL: its run id). Keyed so that a replayed append is a no-op.
CREATE TABLE thread_messages (
    thread_id  text    NOT NULL,
    run_id     bigint  NOT NULL,
    idx        integer NOT NULL,
    message    text    NOT NULL,
    created_at double precision NOT NULL,
    tenant     text NOT NULL DEFAULT '',
    turn       double precision,
    PRIMARY KEY (tenant, thread_id, run_id, idx)
);

CREATE TABLE workers (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host         text    NOT NULL,
    pid          integer NOT NULL,
    queues       text    NOT NULL,
    tasks        text    NOT NULL,
    started_at   double precision NOT NULL,
    heartbeat_at double precision NOT NULL,
    -- its app's version, and each task with the majors it runs (JSON; NULL: any)
    version      text    NOT NULL DEFAULT '0.0.0',
    majors       text
);

-- Every worker fires due schedules; a fire is a run keyed by the schedule and its
-- fire time, so any number of workers firing it make one run.
CREATE TABLE schedules (
    name           text    PRIMARY KEY,
    cron           text    NOT NULL,
    tz             text    NOT NULL,
    task           text    NOT NULL,
    args           text    NOT NULL,
    queue          text    NOT NULL,
    priority       integer NOT NULL,
    max_attempts   integer NOT NULL,
    misfire        text    NOT NULL CHECK (misfire IN ('skip', 'catch_up')),
    catch_up_limit integer NOT NULL,
    paused         boolean NOT NULL DEFAULT false,
    next_fire_at   double precision NOT NULL,
    created_at     double precision NOT NULL,
    updated_at     double precision NOT NULL
);

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

-- A signal sent to a run (run.signal, signal-with-start), numbered per run in the order
-- sent. Pending until a wait of the run takes it: `position` is then the journal position
-- of that wait (one signal per position), so a replay finds the same one. `key` makes a
-- send idempotent: one signal per key of a run. A pending signal its sender withdrew (an
-- update given up on) is kept, marked, and never taken.
CREATE TABLE signals (
    run_id   bigint  NOT NULL,
    seq      bigint  NOT NULL,
    name     text    NOT NULL,
    payload  text    NOT NULL,
    sent_at  double precision NOT NULL,
    key      text,
    sent_by  text,
    position integer,
    taken_at double precision,
    withdrawn_at double precision,
    PRIMARY KEY (run_id, seq)
);
CREATE UNIQUE INDEX signals_key ON signals (run_id, key) WHERE key IS NOT NULL;
CREATE UNIQUE INDEX signals_position ON signals (run_id, position) WHERE position IS NOT NULL;
-- What a wait takes: the oldest pending signal of a name.
CREATE INDEX signals_pending ON signals (run_id, name, seq) WHERE position IS NULL AND withdrawn_at IS NULL;

-- A named lease: one process at a time does what it guards (the retention sweep), and
-- a holder that dies loses it when it lapses.
CREATE TABLE leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at double precision NOT NULL
);

-- The ranges of run ids reclaimed by retention (a handful: each pass widens one), so
-- that a reader of a reclaimed run is told it expired, not that it never existed.
CREATE TABLE reclaimed (
    lo bigint PRIMARY KEY,
    hi bigint NOT NULL
);

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

-- The fleet bus: a row per slot of a fleet root (its generation grows across lives; state
-- NULL: the slot is free), and the queues paused fleet-wide.
CREATE TABLE fleet_slots (
    root         text    NOT NULL,
    kind         text    NOT NULL,
    ordinal      integer NOT NULL,
    generation   bigint  NOT NULL,
    state        text    CHECK (state IN ('ready', 'resyncing', 'recycling')),
    host         text,
    pid          integer,
    drain_s      double precision,
    claimed_at   double precision,
    heartbeat_at double precision,
    expires_at   double precision,
    PRIMARY KEY (root, kind, ordinal)
);

-- Queues paused fleet-wide: no worker of the root claims from them, including workers
-- started later (they read this at boot).
CREATE TABLE fleet_paused_queues (
    root      text NOT NULL,
    queue     text NOT NULL,
    paused_at double precision NOT NULL,
    PRIMARY KEY (root, queue)
);

-- A run's wait for an event, registered (fenced) under its journal position before it
-- waits, so a replay finds the same one. A publish of `name` in `tenant` ('' = no tenant)
-- whose data fits `match_json` delivers to it while it is `waiting`, as a signal of the
-- run, and marks it `delivered` (`event_id`); a wait whose timeout passed is `closed`.
CREATE TABLE event_waits (
    run_id        bigint  NOT NULL,
    position      integer NOT NULL,
    tenant        text    NOT NULL,
    name          text    NOT NULL,
    match_json    text    NOT NULL,
    registered_at double precision NOT NULL,
    state         text    NOT NULL,
    event_id      text,
    PRIMARY KEY (run_id, position)
);
-- What a publish reads: the waiting registrations of its tenant and name.
CREATE INDEX event_waits_waiting ON event_waits (tenant, name, run_id) WHERE state = 'waiting';

-- A published event, kept by its id within its tenant: published again, it delivers
-- nothing again (the runs it woke and could not deliver to are its first publish's).
CREATE TABLE published_events (
    tenant       text NOT NULL,
    id           text NOT NULL,
    name         text NOT NULL,
    data         text NOT NULL,
    published_at double precision NOT NULL,
    published_by text,
    woken        text NOT NULL,
    full_runs    text NOT NULL,
    PRIMARY KEY (tenant, id)
);
-- What retention forgets first: the ids published longest ago.
CREATE INDEX published_events_at ON published_events (published_at);

-- Keep signal p_name of run p_run when the rulebook would (rules.plan_signal): the run
-- exists, is the sender's tenant's (p_tenant NULL: any), has not ended (p_ended), no
-- signal of the run has p_key, and fewer than p_max_pending wait. Then the signal, its
-- `signalled` event (p_logged, the rulebook's data, its "signal" set to the number kept)
-- and the run's wake (sql.WAKE's) are written and notified (the queue only when the run
-- waits queued), delivered into the run's lingering wait of that name if there is one
-- (not where the journal holds that position already; its entry told on p_delivered),
-- and the signal returned as kept;
-- else nothing is written and nothing returned (the caller then sends the slow way, in a
-- transaction of its own whose reads the rulebook judges, and raises as it decides).
-- A function for its snapshots: under READ COMMITTED each statement of a function reads
-- anew, so the reads after the run's lock see every signal kept by the senders it waited
-- behind (one statement's reads keep the snapshot from before its lock wait, and two
-- racing senders numbered a signal alike). Its tables are this schema's, whatever the
-- caller's search_path (FROM CURRENT: the migration's).
CREATE FUNCTION signal_keep(p_run bigint, p_tenant text, p_name text, p_payload text,
                            p_now double precision, p_key text, p_by text, p_max_pending integer,
                            p_ended text[], p_logged jsonb, p_events text, p_queued text,
                            p_delivered text)
RETURNS SETOF signals LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    v_state text;
    v_tenant text;
    v_fence bigint;
    v_wait jsonb;
    v_seq bigint;
    v_logged_seq integer;
    v_queue text;
    v_kept signals;
    v_taken signals;
    v_entry text;
    v_told text;
BEGIN
    SELECT r.state, r.tenant, r.fence, r.lingering INTO v_state, v_tenant, v_fence, v_wait
    FROM runs r WHERE r.id = p_run FOR UPDATE;
    IF NOT FOUND OR v_state = ANY (p_ended) OR (p_tenant IS NOT NULL AND v_tenant IS DISTINCT FROM p_tenant) THEN
        RETURN;
    END IF;
    IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM signals s WHERE s.run_id = p_run AND s.key = p_key) THEN
        RETURN;
    END IF;
    IF (SELECT count(*) FROM signals s
        WHERE s.run_id = p_run AND s.position IS NULL AND s.withdrawn_at IS NULL) >= p_max_pending THEN
        RETURN;
    END IF;
    SELECT coalesce(max(s.seq), 0) + 1 INTO v_seq FROM signals s WHERE s.run_id = p_run;
    INSERT INTO signals (run_id, seq, name, payload, sent_at, key, sent_by)
    VALUES (p_run, v_seq, p_name, p_payload, p_now, p_key, p_by)
    RETURNING * INTO v_kept;
    UPDATE runs r SET last_seq = r.last_seq + 1,
        run_at = CASE WHEN r.state = 'queued' AND r.waiting = 'signal' AND r.run_at > p_now THEN p_now
                      ELSE r.run_at END,
        wake_requested = CASE WHEN r.state = 'running' THEN true ELSE r.wake_requested END
    WHERE r.id = p_run
    RETURNING r.last_seq, r.queue INTO v_logged_seq, v_queue;
    INSERT INTO events (run_id, seq, kind, data, at)
    VALUES (p_run, v_logged_seq, 'signalled', jsonb_set(p_logged, '{signal}', to_jsonb(v_seq))::text, p_now);
    IF v_state = 'running' AND v_wait->>'name' = p_name AND (v_wait->>'fence')::bigint = v_fence
       AND NOT EXISTS (SELECT 1 FROM steps st
                       WHERE st.run_id = p_run AND st.position = (v_wait->>'position')::integer) THEN
        -- The oldest pending signal of the name, as the wait's own take would pick (this
        -- one, unless one came the slow way meanwhile), taken and journaled as the take
        -- writes it (see _signals.TAKE), the `step` event after the `signalled` one.
        UPDATE signals s SET position = (v_wait->>'position')::integer, taken_at = p_now
        WHERE s.run_id = p_run AND s.seq = (
            SELECT min(p.seq) FROM signals p
            WHERE p.run_id = p_run AND p.name = p_name AND p.position IS NULL AND p.withdrawn_at IS NULL)
        RETURNING * INTO v_taken;
        v_entry := json_build_object('payload', v_taken.payload::json, 'seq', v_taken.seq,
                                     'sent_at', v_taken.sent_at)::text;
        UPDATE runs r SET last_seq = r.last_seq + 1, lingering = NULL WHERE r.id = p_run
        RETURNING r.last_seq INTO v_logged_seq;
        INSERT INTO steps (run_id, position, name, status, result, error, fence, created_at)
        VALUES (p_run, (v_wait->>'position')::integer, v_wait->>'step', 'done', v_entry, NULL, v_fence,
                p_now);
        INSERT INTO events (run_id, seq, kind, data, at)
        VALUES (p_run, v_logged_seq, 'step', v_wait->>'logged', p_now);
        -- The entry to the wait's process, when it fits a notification (under 8000 bytes;
        -- else the woken wait reads it): the wake then costs no read. Before the log's
        -- notification, which wakes the wait.
        v_told := concat_ws(',', p_run, v_fence, v_wait->>'position', v_entry);
        IF octet_length(v_told) < 8000 THEN
            PERFORM pg_notify(p_delivered, v_told);
        END IF;
    END IF;
    PERFORM pg_notify(p_events, p_run::text);
    -- Work for the workers only when the run waits queued (parked, it is due now): one
    -- running (lingering in its slot for this signal) gives them nothing to claim.
    IF v_state = 'queued' THEN
        PERFORM pg_notify(p_queued, v_queue);
    END IF;
    RETURN NEXT v_kept;
END
$$;
-- Concurrency limits per key (migration 26): the limited claim counts running runs by
-- the limits of runs_limited_running and walks runs_limited_due; neither holds a run
-- without limits.
CREATE INDEX runs_limited_running ON runs (id) WHERE state = 'running' AND limits IS NOT NULL;
CREATE INDEX runs_limited_due ON runs (queue, priority, run_at, id)
    WHERE state = 'queued' AND limits IS NOT NULL;
-- An operator's max for a limit ("<name>") or one key of it ("<name>:<key>").
CREATE TABLE limit_overrides (
    target text PRIMARY KEY,
    max    integer NOT NULL
);
-- Flow control per key at submission (migration 27): a key's latest run and its due time.
CREATE TABLE flow_keys (
    slot   text PRIMARY KEY,
    run_id bigint,
    at     double precision
);
-- The claim of runs without limits walks only those (migration 28): a backlog of limited
-- runs held behind a full key is never stepped over by it.
CREATE INDEX runs_free_due ON runs (queue, priority, run_at, id)
    WHERE state = 'queued' AND limits IS NULL;
-- A limited claim that holds a full key back reads each other key's first runs along it.
CREATE INDEX runs_limited_keys ON runs (limits, priority, run_at, id)
    WHERE state = 'queued' AND limits IS NOT NULL;
-- When a worker's next limited run comes due, its due ones held back by their keys.
CREATE INDEX runs_limited_at ON runs (queue, run_at)
    WHERE state = 'queued' AND limits IS NOT NULL;
-- Rates per key (migration 29): one row per start under a rate, until its window ends.
CREATE TABLE rate_spent (
    slot   text NOT NULL,
    until  double precision NOT NULL,
    run_id bigint NOT NULL,
    cost   double precision NOT NULL,
    PRIMARY KEY (slot, until, run_id)
);
CREATE INDEX rate_spent_until ON rate_spent (until);
