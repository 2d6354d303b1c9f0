-- Schema 25: a signal's send in one round trip (it was five: BEGIN, the run's lock, the
-- reads the rulebook decides on, the writes, COMMIT; a signal's wake waits on them all),
-- and straight into the wait that lingers for it.

-- The wait of a running run that lingers in its slot for a signal (ctx.wait_signal, for
-- SIGNAL_LINGER_S), as its take that found none registered it: {"fence", "position",
-- "name" (the signal's), "step" (its journal entry's name), "logged" (that entry's `step`
-- event's data)}. A send of that name, under that fence, delivers into it: the oldest
-- pending signal of the name taken at that position and journaled there, in the send's
-- write, so the woken wait only reads its entry. NULL when no wait lingers; the wait's
-- last take, and a delivery, clear it; one left behind (the run parked, ended, or taken
-- over) is stale by its fence or the run's state, and delivers nothing.
ALTER TABLE runs ADD COLUMN lingering jsonb;

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
