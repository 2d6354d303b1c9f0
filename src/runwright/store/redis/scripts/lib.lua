-- The prelude of every runwright script (prepended when the script is loaded).
--
-- KEYS[1] is always "<prefix>ids", the run-id counter, where <prefix> is
-- "rw:{<namespace>}:". Every other key a script touches is built from that prefix, so it
-- carries the same hash tag and lives in the same Redis Cluster slot: a deployment is one
-- slot, and every script stays atomic on one node.
--
-- Encoding: a run is the hash <prefix>run:<id>, one field per column; an absent field is
-- NULL. ARGV cannot carry nil, so NIL (one NUL byte) stands for "no value". Times are
-- epoch seconds written with %.17g, which round-trips a double exactly (Lua's default
-- tostring keeps only 14 digits and would move a lease or a due time).
--
-- CLAIM_READS, the run hash's fields the claim reads, in the order Python reads them back,
-- is defined above this prelude when the scripts are loaded (_scripts.py, from _codec.py).

local P = string.sub(KEYS[1], 1, #KEYS[1] - 3)
local NIL = '\0'
local done_ids, event_ids, cancel_ids, requeued = {}, {}, {}, false
-- `ended` keeps the runs that ended in the last hour (the summary looks back 15 minutes),
-- and of those at most the newest ENDED_KEEP (defined above this prelude, see _scripts.py):
-- its readers take the latest few thousand, and a limit by age alone would grow it with
-- the throughput (an hour at 1,000 runs/s is 3.6 million entries).
local ENDED_KEEP_S, last_ended_at, ended_now = 3600, nil, {}

-- Formatting a double exactly is dear (glibc's multi-precision path), and most calls of a
-- script format the same `now`: the last one is kept.
local num_last, num_text
local function num(x)
  if x ~= num_last then num_last, num_text = x, string.format('%.17g', x) end
  return num_text
end

-- The time a decision is judged by: the caller's injected `now` when given (tests drive
-- the clock), else the Redis server's own clock, never a worker's.
local function now_of(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- Due-set members are zero-padded ids: equal scores (run_at) then order by member,
-- which is submission order, as on the SQL backends.
local function pad(id) return string.format('%020d', id) end
-- An integer as the text Redis stores. Redis 7.0 formats every number handed to
-- redis.call with printf's %.17g (and Lua's own tostring with %.14g): the C library's
-- multi-precision path, a few percent of all of Redis's time on the hot path. So the hot
-- scripts hand Redis text: %d formats an integer without it.
local function int(n) return string.format('%d', n) end
local function run_key(id) return P .. 'run:' .. id end
-- Queued runs wait in one due set per (priority, major, queue, task), so a worker only
-- ever looks at runs it can run: runs of other tasks or majors ahead of them cannot hide
-- them. dues:<queue> lists the sets of a queue as "<priority>.<major>:<task>" (integers,
-- the pair ending at the first colon), or "<priority>:<task>" for runs that recorded no
-- version (any major's: the layout of schema 1, read as it was); the key gives the
-- queue's length in bytes before it, which keeps queue and task apart whatever
-- characters they hold (_store.py's due_key builds the same).
local function due_head(priority, major)
  if major then return priority .. '.' .. major end
  return tostring(priority)
end
local function due_key(priority, queue, task, major)
  return P .. 'due:' .. due_head(priority, major) .. ':' .. #queue .. ':' .. queue .. ':' .. task
end
local function dues_of(queue)
  local out = {}
  for _, member in ipairs(redis.call('SMEMBERS', P .. 'dues:' .. queue)) do
    local priority, major, task = string.match(member, '^(-?%d+)%.?(%d*):(.*)$')
    if major == '' then major = nil end
    out[#out + 1] = {priority = tonumber(priority), major = major, task = task, member = member,
                     key = due_key(priority, queue, task, major)}
  end
  return out
end
local function opt(value) if value == NIL then return nil end return value end

-- Is a worker dead? 'gone' when its registration is gone (deregistered, or declared dead
-- before): dead for sure. 'lapsed' when its liveness key lapsed or its heartbeat is older
-- than `stale_before`: maybe only reconnecting, which the caller gives a moment
-- (_liveness.py). nil when alive. Read by rescue_scan to decide, and again by rescue at the
-- moment it applies the decision: a worker that came back in between is spared.
local function worker_death(worker, stale_before)
  if redis.call('HEXISTS', P .. 'workers', worker) == 0 then return 'gone' end
  if redis.call('EXISTS', P .. 'alive:' .. worker) == 0 then return 'lapsed' end
  local beat = redis.call('HGET', P .. 'beats', worker)
  if beat == false or tonumber(beat) < stale_before then return 'lapsed' end
  return nil
end

local function load(id)
  local flat = redis.call('HGETALL', run_key(id))
  if #flat == 0 then return nil end
  local run = {}
  for i = 1, #flat, 2 do run[flat[i]] = flat[i + 1] end
  return run
end

-- Only the named fields of a run (nil if there is no such run): on the hot path a run's
-- args and result need not be copied into Lua to be moved between sets.
local function load_fields(id, names)
  local values = redis.call('HMGET', run_key(id), unpack(names))
  if not values[1] then return nil end  -- names[1] must be a field every run has
  local run = {}
  for i, name in ipairs(names) do
    if values[i] then run[name] = values[i] end
  end
  return run
end

-- Counters by (tenant, queue, state), kept by every state change, so that counts and
-- queue stats never scan the runs. cjson keeps the three parts apart unambiguously.
-- A script adds its deltas up and writes each counter once, in publish(): a batch of 200
-- claims then costs one HINCRBY per counter, not two per run.
local count_deltas, count_fields = {}, {}
local function count(run, state, delta)
  local tenant = run.tenant or ''
  local by_queue = count_fields[tenant]
  if not by_queue then by_queue = {}; count_fields[tenant] = by_queue end
  local by_state = by_queue[run.queue]
  if not by_state then by_state = {}; by_queue[run.queue] = by_state end
  local field = by_state[state]
  if not field then
    field = cjson.encode({tenant, run.queue, state})
    by_state[state] = field
  end
  count_deltas[field] = (count_deltas[field] or 0) + delta
end

local function flush_counts()
  for field, delta in pairs(count_deltas) do
    if delta ~= 0 then redis.call('HINCRBY', P .. 'counts', field, delta) end
  end
  count_deltas = {}
end

-- A state change in the books (counters); the caller writes the state field itself.
local function shift(run, state)
  count(run, run.state, -1)
  count(run, state, 1)
  run.state = state
end

local function move(id, run, state)
  shift(run, state)
  redis.call('HSET', run_key(id), 'state', state)
end

-- Append one event as seq `seq` (last_seq + 1): the log is a list where seq n is index
-- n-1, so last_seq and the list length move together and the log stays gapless. The
-- caller writes last_seq = seq in the same script.
-- An event of a threaded run is also named ("<id>:<seq>") in its thread's log tev:<n>,
-- whose index + 1 is the event's tseq: numbered as it is appended, in the one script
-- that appends it, so the thread's numbers are gapless and in append order.
-- `thread_no`: the run's, or false when it has none; a caller that has not read the run
-- leaves it out, and it is read here.
-- `append_entry` takes the event as its log holds it, the JSON array [kind, data, at];
-- `append` makes it.
local function append_entry(id, seq, entry, thread_no)
  redis.call('RPUSH', P .. 'ev:' .. id, entry)
  event_ids[#event_ids + 1] = id
  if thread_no == nil then thread_no = redis.call('HGET', run_key(id), 'thread_no') end
  if thread_no then redis.call('RPUSH', P .. 'tev:' .. thread_no, id .. ':' .. seq) end
end

local function append(id, seq, kind, data, now, thread_no)
  append_entry(id, seq, cjson.encode({kind, data, num(now)}), thread_no)
end

local function log(id, kind, data, now)
  local seq = redis.call('HINCRBY', run_key(id), 'last_seq', 1)
  append(id, seq, kind, data, now)
  return seq
end

-- One command for many members, in chunks (unpack is bounded by Lua's C stack).
local function call_many(command, key, members)
  for i = 1, #members, 1000 do
    redis.call(command, key, unpack(members, i, math.min(#members, i + 999)))
  end
end

-- A queued run that carries concurrency limits (its `limits` text) is in its due set as
-- any other, and also in the due set of its text within it, ldue:<n>:<text>:<due set>
-- (n: the text's length in bytes, which keeps text and due set apart), by run_at. The
-- runs of one key carry one text (their task's declaration), so the limited claim
-- (claim.lua) looks only at the heads of texts whose keys have room: lheads:<due set>
-- holds each text with queued runs as "<its first run's padded id><text>" scored by that
-- run's run_at, so that it is in claim order (run_at, then id), and the backlog
-- of a full key is stepped over as one text, never run by run. lqueued counts the runs
-- with limits in each due set: one holding none else is not walked by the limited claim.
-- Every script that adds a run to a due set or takes one out does it through these
-- (enqueue, dequeue, limited_left), so the sets never disagree. Key layout 5 (_store.py).
local function due_rest(due)  -- a due set's key after "<prefix>due:"
  return string.sub(due, #P + 5)
end
local function text_key(due, text)
  return P .. 'ldue:' .. #text .. ':' .. text .. ':' .. due_rest(due)
end
local function heads_key(due) return P .. 'lheads:' .. due_rest(due) end
-- The first run of a text's due set (its padded id, run_at), or nil.
local function text_head(due, text)
  local head = redis.call('ZRANGE', text_key(due, text), 0, 0, 'WITHSCORES')
  return head[1], head[2]
end
-- After runs of `text` came or went: the text's place among its due set's, by its head
-- (`before`: its head's padded id before, or nil).
local function limited_head(due, text, before)
  local head, run_at = text_head(due, text)
  if before and before ~= head then redis.call('ZREM', heads_key(due), before .. text) end
  if head then redis.call('ZADD', heads_key(due), run_at, head .. text) end
end
-- `n` runs with limits came into (n > 0) or left (n < 0) due set `due`.
local function limited_count(due, n)
  if redis.call('HINCRBY', P .. 'lqueued', due, n) <= 0 then redis.call('HDEL', P .. 'lqueued', due) end
end
-- Runs of `text` (padded ids) the claim took out of due set `due` (it ZREMs them there,
-- and counts them out of lqueued); `before`: the text's head before.
local function limited_left(due, text, members, before)
  call_many('ZREM', text_key(due, text), members)
  limited_head(due, text, before)
end

local function enqueue(id, run)
  local due = due_key(run.priority, run.queue, run.task, run.major)
  local added = redis.call('ZADD', due, run.run_at, pad(id))
  redis.call('SADD', P .. 'dues:' .. run.queue, due_head(run.priority, run.major) .. ':' .. run.task)
  if run.limits then
    local padded = pad(id)
    local before, before_at = text_head(due, run.limits)
    redis.call('ZADD', text_key(due, run.limits), run.run_at, padded)
    if added == 1 then limited_count(due, 1) end
    -- A run that comes after the text's head (a backlog submitted) leaves it as it was.
    local behind = before and before ~= padded and (tonumber(before_at) < tonumber(run.run_at) or
      (tonumber(before_at) == tonumber(run.run_at) and before < padded))
    if not behind then limited_head(due, run.limits, before) end
  end
  requeued = true
end

local function dequeue(id, run)
  local due = due_key(run.priority, run.queue, run.task, run.major)
  local removed = redis.call('ZREM', due, pad(id))
  if run.limits then
    local before = text_head(due, run.limits)
    redis.call('ZREM', text_key(due, run.limits), pad(id))
    if removed == 1 then limited_count(due, -1) end
    if before == pad(id) then limited_head(due, run.limits, before) end  -- else the head stays
  end
end

local function owns(run, fence)
  return run ~= nil and run.fence == fence and run.state == 'running'
end

-- rules.check_parents_fenced: ARGV[at] is m, then m pairs (parent id, fence). The reply
-- {'lost', parent id, fence} for the first parent not running at its fence, else nil;
-- an insert checks it before it writes anything.
local function parent_lost(at)
  for i = at + 1, at + 2 * tonumber(ARGV[at]), 2 do
    if not owns(load_fields(ARGV[i], {'state', 'fence'}), ARGV[i + 1]) then
      return {'lost', ARGV[i], ARGV[i + 1]}
    end
  end
  return nil
end

-- A running run leaves its owner's books (lease set, owned set). The sets are written in
-- publish(), one ZREM and one SREM per owner for the whole batch, and whether the owner
-- still owns anything is settled there too.
local leaving, disowning = {}, {}
local function leave_owner(id, run)
  leaving[#leaving + 1] = id
  if run.owner then
    local ids = disowning[run.owner]
    if not ids then ids = {}; disowning[run.owner] = ids end
    ids[#ids + 1] = id
  end
end

local function disown(id, run)
  leave_owner(id, run)
  redis.call('HDEL', run_key(id), 'owner', 'lease_expires_at')
end

local function settle_owners()
  call_many('ZREM', P .. 'running', leaving)
  -- A limited run that stops running (an end, a give-back, a takeover) leaves lheld, the
  -- limits of the runs running now that the limited claim counts (claim.lua), in the
  -- same script as its state: its slot is free, and claimers are woken for it.
  for i = 1, #leaving, 1000 do
    if redis.call('HDEL', P .. 'lheld', unpack(leaving, i, math.min(#leaving, i + 999))) > 0 then
      requeued = true
    end
  end
  for owner, ids in pairs(disowning) do
    call_many('SREM', P .. 'owned:' .. owner, ids)
    if redis.call('SCARD', P .. 'owned:' .. owner) == 0 then redis.call('SREM', P .. 'owners', owner) end
  end
  leaving, disowning = {}, {}
end

-- Drop what a run added to its thread's history (rollback).
local function forget_messages(id, run)
  if not run.thread_no then return end
  local messages = P .. 'tmsg:' .. run.thread_no
  local prefix = pad(id)
  for _, field in ipairs(redis.call('HKEYS', messages)) do
    if string.sub(field, 1, 20) == prefix then redis.call('HDEL', messages, field) end
  end
end

-- A child ended: its parked parent comes due now; a running parent is flagged so that
-- its park (which may be on its way) wakes at once.
local function wake_parent(parent_id, now)
  local parent = load(parent_id)
  if not parent then return end
  if parent.state == 'queued' and tonumber(parent.run_at) > now and parent.waiting ~= PAUSED then
    parent.run_at = num(now)
    redis.call('HSET', run_key(parent_id), 'run_at', parent.run_at)
    enqueue(parent_id, parent)
  elseif parent.state == 'running' then
    redis.call('HSET', run_key(parent_id), 'wake_requested', '1')
  end
end

-- Signals (signal_send, signal_start, signal_take): a run's signals are the hash
-- sigs:<id>, seq -> JSON {name, payload, sent_at, key, sent_by, position, taken_at} (text
-- values: cjson would round a time to 14 digits); sigpend:<id>:<name> the pending seqs of
-- a name, oldest first; sigkeys:<id> key -> seq; sigpos:<id> journal position -> seq; the
-- run's hash counts them (signal_seq, the last seq given; signals_pending). A run parked
-- on a signal wait comes due now; one running is flagged, so a park on its way wakes.
local function keep_signal(id, seq, name, payload, key, by, event, now)
  local signal = {name = name, payload = payload, sent_at = num(now), key = opt(key), sent_by = opt(by)}
  local text = cjson.encode(signal)
  redis.call('HSET', P .. 'sigs:' .. id, seq, text)
  redis.call('ZADD', P .. 'sigpend:' .. id .. ':' .. name, seq, seq)
  if signal.key then redis.call('HSET', P .. 'sigkeys:' .. id, signal.key, seq) end
  redis.call('HSET', run_key(id), 'signal_seq', seq)
  redis.call('HINCRBY', run_key(id), 'signals_pending', 1)
  log(id, 'signalled', event, now)
  local run = load_fields(id, {'state', 'waiting', 'run_at', 'priority', 'queue', 'task', 'major',
                                 'limits'})
  if run.state == 'queued' and run.waiting == 'signal' and tonumber(run.run_at) > now then
    run.run_at = num(now)
    redis.call('HSET', run_key(id), 'run_at', run.run_at)
    enqueue(id, run)
  elseif run.state == 'running' then
    redis.call('HSET', run_key(id), 'wake_requested', '1')
  end
  return text
end

-- A run ended for good: it no longer holds its thread, has no deadline to watch, and its
-- parent may be waiting for it. The next run of its thread may now be claimed.
local function ended(id, run, now)
  if run.thread_no then
    redis.call('ZREM', P .. 'topen:' .. run.thread_no, id)
    requeued = true
  end
  if run.deadline_at then redis.call('ZREM', P .. 'deadlines', id) end
  if run.parent_id then wake_parent(run.parent_id, now) end
  done_ids[#done_ids + 1] = id
  -- The summary's latency sample: ended runs by end time, added and trimmed in publish().
  ended_now[#ended_now + 1] = num(now)
  ended_now[#ended_now + 1] = id
  last_ended_at = now
end

-- A queued run (not started, or parked) ends now: cancelled, or interrupted by a newer
-- run on its thread.
local function end_queued(id, state, now, kind, data, err, interrupt)
  local run = load(id)
  if not run or run.state ~= 'queued' then return false end
  dequeue(id, run)
  move(id, run, state)
  redis.call('HSET', run_key(id), 'finished_at', num(now))
  redis.call('HDEL', run_key(id), 'owner')
  if err then redis.call('HSET', run_key(id), 'error', err) end
  if interrupt then redis.call('HSET', run_key(id), 'interrupt', interrupt) end
  ended(id, run, now)
  log(id, kind, data, now)
  return true
end

-- A thread listed: its identity on its hash, and in the lists of threads by creation
-- time (every thread's, and its tenant's), so that a page of them is a range read.
local function thread_index(no, ident, created_at)
  redis.call('HSET', P .. 'thread:' .. no, 'ident', ident)
  redis.call('ZADD', P .. 'tlist', created_at, ident)
  redis.call('ZADD', P .. 'tlist:' .. cjson.decode(ident)[1], created_at, ident)
end

-- A thread is numbered on first use: (tenant, name), encoded unambiguously by the
-- caller, maps to its number, and every key of the thread is built from the number.
local function thread_no_of(ident, now, create)
  local no = redis.call('HGET', P .. 'threads', ident)
  if no or not create then return no end
  no = tostring(redis.call('INCR', P .. 'thread_ids'))
  redis.call('HSET', P .. 'threads', ident, no)
  redis.call('HSET', P .. 'thread:' .. no, 'created_at', num(now))
  thread_index(no, ident, num(now))
  return no
end

-- Insert one new run from ARGV[i .. i+19] (see insert.lua), with its `submitted` event.
-- Returns the run's id, or the existing run's id and true when its (tenant, key) exists.
local INSERT_FIELDS = 20
local function insert_one(i, now)
  local ident = ARGV[i]
  local existing = redis.call('HGET', P .. 'keys', ident)
  if existing then return existing, true end
  local id = int(redis.call('INCR', KEYS[1]))
  local run = {key = ARGV[i + 1], task = ARGV[i + 2], queue = ARGV[i + 3], priority = ARGV[i + 4],
               args = ARGV[i + 5], max_attempts = ARGV[i + 6], timeout_s = opt(ARGV[i + 7]),
               run_at = opt(ARGV[i + 8]) or num(now), parent_id = opt(ARGV[i + 9]),
               budget = opt(ARGV[i + 10]), deadline_at = opt(ARGV[i + 11]),
               thread = opt(ARGV[i + 12]), tenant = opt(ARGV[i + 13]),
               traceparent = opt(ARGV[i + 16]), version = opt(ARGV[i + 17]),
               major = opt(ARGV[i + 18]), limits = opt(ARGV[i + 19])}
  local fields = {'id', id, 'state', 'queued', 'attempt', '0', 'fence', '0', 'recoveries', '0',
                  'cancel_requested', '0', 'wake_requested', '0', 'last_seq', '0', 'created_at', num(now)}
  for _, name in ipairs({'key', 'task', 'queue', 'priority', 'args', 'max_attempts', 'timeout_s',
                         'run_at', 'parent_id', 'budget', 'deadline_at', 'thread', 'tenant',
                         'traceparent', 'version', 'major', 'limits'}) do
    if run[name] then fields[#fields + 1] = name; fields[#fields + 1] = run[name] end
  end
  if run.thread then
    -- The thread's identity is (tenant, name), passed encoded after the run's fields.
    run.thread_no = thread_no_of(ARGV[i + 15], now, true)
    fields[#fields + 1] = 'thread_no'; fields[#fields + 1] = run.thread_no
    redis.call('ZADD', P .. 'topen:' .. run.thread_no, id, id)
    redis.call('ZADD', P .. 'truns:' .. run.thread_no, id, id)
  end
  redis.call('HSET', run_key(id), unpack(fields))
  redis.call('HSET', P .. 'keys', ident, id)
  redis.call('ZADD', P .. 'runs', id, id)
  run.state = 'queued'
  count(run, 'queued', 1)
  enqueue(id, run)
  if run.deadline_at then redis.call('ZADD', P .. 'deadlines', run.deadline_at, id) end
  if run.parent_id then redis.call('SADD', P .. 'children:' .. run.parent_id, id) end
  log(id, 'submitted', ARGV[i + 14], now)
  if run.parent_id then
    -- rules.born_cancelled: a child of a cancelled family ends as it is born. A cancel
    -- (cancel.lua) and this insert each run alone: the cancel finds the child, or the
    -- child finds the cancel.
    local parent = redis.call('HMGET', run_key(run.parent_id), 'state', 'cancel_requested')
    if parent[1] and (CANCELS_CHILDREN[parent[1]] or parent[2] == '1') then
      end_queued(id, 'cancelled', now, 'cancelled', BORN_CANCELLED_DATA, BORN_CANCELLED_ERROR, nil)
    end
  end
  return id, false
end

-- A run's journal is the hash steps:<id>, position -> identity .. "\n" .. created_at,
-- where identity is JSON [fence, name, status, result, error]. A done snapshot at
-- position p moves the entries before it to steps_old:<id> and is noted in the run's
-- snapshot_at, so a resume reads only steps:<id>: the snapshot and what came after.
local function archive_before(id, p)
  local steps, old = P .. 'steps:' .. id, P .. 'steps_old:' .. id
  local flat = redis.call('HGETALL', steps)
  for i = 1, #flat, 2 do
    if tonumber(flat[i]) < p then
      redis.call('HSET', old, flat[i], flat[i + 1])
      redis.call('HDEL', steps, flat[i])
    end
  end
  redis.call('HSET', run_key(id), 'snapshot_at', p)
end

local function is_snapshot(entry)
  local held = cjson.decode(string.match(entry, '^(.-)\n'))
  return held[2] == 'snapshot' and held[3] == 'done'
end

-- The notifications ride along with the change: a hint to re-read, never the truth.
local function publish()
  flush_counts()
  if last_ended_at then
    call_many('ZADD', P .. 'ended', ended_now)  -- (score, id) pairs: chunks of 1000 keep them whole
    ended_now = {}
    redis.call('ZREMRANGEBYSCORE', P .. 'ended', '-inf', '(' .. num(last_ended_at - ENDED_KEEP_S))
    redis.call('ZREMRANGEBYRANK', P .. 'ended', 0, -(ENDED_KEEP + 1))  -- rank 0: the oldest
  end
  settle_owners()
  if #done_ids > 0 then redis.call('PUBLISH', P .. 'done', table.concat(done_ids, ',')) end
  if #event_ids > 0 then redis.call('PUBLISH', P .. 'events', table.concat(event_ids, ',')) end
  if #cancel_ids > 0 then redis.call('PUBLISH', P .. 'cancel', table.concat(cancel_ids, ',')) end
  if requeued then redis.call('PUBLISH', P .. 'queued', '') end
end

-- ---- the operation ---------------------------------------------------------------
