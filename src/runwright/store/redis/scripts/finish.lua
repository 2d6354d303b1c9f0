-- finish: fenced ends of attempts, as one batch.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  s, the number of stop requests (rules.REQUEUE_STOPS, in precedence order);
--          then per stop: the run field that carries it, the state it ends as, its error
-- then    the finishes, one JSON array of arrays of 10 values: run id, fence, target state,
--          result, error, run_at (strings, or null), release (a boolean), event kind,
--          event data, waiting (a requeue's WaitReason, or null). One argument, not 10 per
--          run: packing them was a tenth of a worker.
-- Returns  the ids whose fence was refused
--
-- A run changes only if the caller's fence is still current and it is still running
-- (BullMQ's lock-token compare). `queued` is a retry (run_at = backoff) or, with release,
-- a give-back or a park whose attempt goes on (rules: the attempt a run is on); a park woken meanwhile by its
-- child comes due at once; a requeue that meets a stop request (a cancel, an interrupt)
-- ends as that stop instead, so the request is never lost. A refused finish whose run
-- already shows this fence and target was our own, its reply lost: a success.
local now = now_of(ARGV[1])
local stops, i = {}, 3
for _ = 1, tonumber(ARGV[2]) do
  stops[#stops + 1] = {flag = ARGV[i], ends_as = ARGV[i + 1], error = ARGV[i + 2]}
  i = i + 3
end
local STOPPED = {}
for _, stop in ipairs(stops) do STOPPED[stop.ends_as] = true end
-- What every finish reads of a run (never its args or result): the fence and state it
-- checks and the books any end updates. A requeue (or a give-back) reads the rest too:
-- its due set, the error it keeps, the wake and stop flags, the attempt a retry moves on.
-- Two short reads, not one long one: a hash field is found by a scan of the hash, so a
-- field asked for costs its share of the hash, and most ends need only these.
local FIELDS = {'state', 'fence', 'owner', 'tenant', 'queue', 'interrupt', 'thread_no', 'parent_id',
                'deadline_at', 'last_seq'}
local REQUEUE_FIELDS = {'priority', 'task', 'major', 'error', 'wake_requested', 'attempt',
                        'pause_requested', 'limits'}
for _, stop in ipairs(stops) do REQUEUE_FIELDS[#REQUEUE_FIELDS + 1] = stop.flag end

local function set(value) return value ~= nil and value ~= '0' end

-- What the end really leads to, and the error it ends with.
local function outcome(run, target, err)
  if target ~= 'queued' then return target, err end
  for _, stop in ipairs(stops) do
    if set(run[stop.flag]) then return stop.ends_as, stop.error end
  end
  return 'queued', err or run.error
end

local function confirmed(run, fence, target)
  return run ~= nil and run.fence == fence
    and (run.state == target or (target == 'queued' and STOPPED[run.state] == true))
end

local function given(value) if value == cjson.null then return nil end return value end

-- Every field this end changes, written together: one HSET (sets) and one HDEL (drops).
local function put(sets, drops, field, value)
  if value then sets[#sets + 1] = field; sets[#sets + 1] = value else drops[#drops + 1] = field end
end

local refused = {}
for _, f in ipairs(cjson.decode(ARGV[i])) do
  local id, fence, target = f[1], f[2], f[3]
  local result, err, run_at = given(f[4]), given(f[5]), given(f[6])
  local release, kind, data, waiting = f[7], f[8], f[9], given(f[10])
  local run = load_fields(id, FIELDS)
  if not owns(run, fence) then
    if not confirmed(run, fence, target) then refused[#refused + 1] = tonumber(id) end
  else
    local key = run_key(id)
    if target == 'queued' or release then
      local more = redis.call('HMGET', key, unpack(REQUEUE_FIELDS))
      for n, name in ipairs(REQUEUE_FIELDS) do run[name] = more[n] or nil end
    end
    local state, final_error = outcome(run, target, err)
    local sets, drops = {'state', state, 'wake_requested', '0'}, {'owner', 'lease_expires_at', 'pause_requested'}
    leave_owner(id, run)
    shift(run, state)
    put(sets, drops, 'result', result)
    put(sets, drops, 'error', final_error)
    if state == 'queued' and not release then put(sets, drops, 'attempt', int(run.attempt + 1)) end
    if state == 'queued' and set(run.pause_requested) then
      -- A requeue asked to pause: held, out of the due sets, until a resume (rules.plan_pause).
      put(sets, drops, 'run_at', PAUSED_AT)
      put(sets, drops, 'finished_at', nil)
      put(sets, drops, 'waiting', PAUSED)
      if waiting ~= PAUSED then kind, data = 'paused', '{}' end
    elseif state == 'queued' then
      run_at = run_at or num(now)  -- a requeue without a time is due now
      if set(run.wake_requested) and waiting ~= PAUSED then run_at = num(math.min(tonumber(run_at), now)) end
      run.run_at = run_at
      put(sets, drops, 'run_at', run_at)
      put(sets, drops, 'finished_at', nil)
      put(sets, drops, 'waiting', waiting)
      if waiting ~= PAUSED then enqueue(id, run) end
    else
      put(sets, drops, 'finished_at', num(now))
      put(sets, drops, 'waiting', nil)
      if state == 'interrupted' and run.interrupt == 'rollback' then forget_messages(id, run) end
      ended(id, run, now)
    end
    local seq = int(run.last_seq + 1)
    put(sets, drops, 'last_seq', seq)
    local thread_no = run.thread_no or false
    if state == target then append(id, seq, kind, data, now, thread_no)
    else append(id, seq, state, '{}', now, thread_no) end
    redis.call('HSET', key, unpack(sets))
    redis.call('HDEL', key, unpack(drops))
  end
end
publish()
return refused
