-- fail_unrunnable: end `failed` the queued runs of some (queue, task, major) that have been
-- due for at least a while: those that no live worker can run (rules.unrunnable_kinds).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)    ARGV[2] due_for_s
-- ARGV[3]  the `failed` event's data
-- ARGV[4]  the ids of the registered workers the kinds were judged over, in id order,
--          comma-separated
-- ARGV[5..] per kind, four values: queue, task, major ('' when unrecorded), the error
--          the runs end with (rules.unrunnable_error)
-- Returns  the closed runs' hashes, or "stale" (nothing done) when the registrations are
--          no longer those: a worker that registered meanwhile may serve these runs, so
--          the caller judges again
--
-- Only runs still queued in the kind's due set and due that long: a claim that came
-- first has taken its run out of the set.
local registered = redis.call('HKEYS', P .. 'workers')
table.sort(registered, function(a, b) return tonumber(a) < tonumber(b) end)
if table.concat(registered, ',') ~= ARGV[4] then return 'stale' end
local now = now_of(ARGV[1])
local cutoff = now - tonumber(ARGV[2])
local out = {}
for i = 5, #ARGV, 4 do
  local queue, task, err = ARGV[i], ARGV[i + 1], ARGV[i + 3]
  local major = ARGV[i + 2] ~= '' and ARGV[i + 2] or nil
  -- A due set holds its runs by run_at; the priority is part of its key, so each of the
  -- queue's sets of this (task, major) is read.
  for _, due in ipairs(dues_of(queue)) do
    if due.task == task and due.major == major then
      for _, member in ipairs(redis.call('ZRANGEBYSCORE', due.key, '-inf', num(cutoff))) do
        local id = tostring(tonumber(member))
        local run = load(id)
        if run and run.state == 'queued' then
          dequeue(id, run)
          move(id, run, 'failed')
          redis.call('HSET', run_key(id), 'finished_at', num(now), 'error', err)
          redis.call('HDEL', run_key(id), 'owner')
          ended(id, run, now)
          log(id, 'failed', ARGV[3], now)
          out[#out + 1] = redis.call('HGETALL', run_key(id))
        end
      end
    end
  end
end
publish()
return out
