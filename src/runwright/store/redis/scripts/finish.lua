-- finish: fenced ends of attempts, as one batch.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  s, the number of stop requests (rules.REQUEUE_STOPS, in precedence order);
--          then per stop: the run field that carries it, the state it ends as, its error
-- then per finish, 9 values: run id, fence, target state, result, error, run_at, release
--          (0/1), event kind, event data; NIL for a missing value
-- Returns  the ids whose fence was refused
--
-- A run changes only if the caller's fence is still current and it is still running
-- (BullMQ's lock-token compare). `queued` is a retry (run_at = backoff) or, with release,
-- a give-back or a park whose attempt does not count; a park woken meanwhile by its
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

local refused = {}
while i <= #ARGV do
  local id, fence, target = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local result, err, run_at = opt(ARGV[i + 3]), opt(ARGV[i + 4]), opt(ARGV[i + 5])
  local release, kind, data = ARGV[i + 6] == '1', ARGV[i + 7], ARGV[i + 8]
  i = i + 9
  local run = load(id)
  if not owns(run, fence) then
    if not confirmed(run, fence, target) then refused[#refused + 1] = tonumber(id) end
  else
    local state, final_error = outcome(run, target, err)
    local key = run_key(id)
    disown(id, run)
    move(id, run, state)
    if result then redis.call('HSET', key, 'result', result) else redis.call('HDEL', key, 'result') end
    if final_error then redis.call('HSET', key, 'error', final_error) else redis.call('HDEL', key, 'error') end
    if release then redis.call('HINCRBY', key, 'attempt', -1) end
    if state == 'queued' then
      run_at = run_at or num(now)  -- a requeue without a time is due now
      redis.call('HDEL', key, 'finished_at')
      if set(run.wake_requested) then run_at = num(math.min(tonumber(run_at), now)) end
      run.run_at = run_at
      redis.call('HSET', key, 'run_at', run_at, 'wake_requested', 0)
      enqueue(id, run)
    else
      redis.call('HSET', key, 'finished_at', num(now), 'wake_requested', 0)
      if state == 'interrupted' and run.interrupt == 'rollback' then forget_messages(id, run) end
      ended(id, run, now)
    end
    if state == target then log(id, kind, data, now) else log(id, state, '{}', now) end
  end
end
publish()
return refused
