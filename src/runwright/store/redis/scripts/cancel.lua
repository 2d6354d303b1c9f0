-- cancel: apply rules.plan_cancel to a run and its open descendants.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  the run id
-- ARGV[3]  what the plan was made from: "id:state:cancel_requested" per member, comma-separated
-- ARGV[4]  the error a cancelled run ends with    ARGV[5] the `cancelled` event's data
-- ARGV[6]  a, the number of running runs to ask to stop; then their ids; then the ids of
--          queued runs that end now
-- Returns  {'stale'} when a member changed since the plan was made (the caller reads
--          and plans again), else {'ok', the run's hash}
--
-- The plan is applied only on the state it was made from: nothing is decided twice.
local now = now_of(ARGV[1])
for member in string.gmatch(ARGV[3], '[^,]+') do
  local id, state, flag = string.match(member, '^(%d+):(%a+):(%d)$')
  local f = redis.call('HMGET', run_key(id), 'state', 'cancel_requested')
  if f[1] ~= state or f[2] ~= flag then return {'stale'} end
end
local asks = tonumber(ARGV[6])
for i = 7, 6 + asks do
  local id = ARGV[i]
  redis.call('HSET', run_key(id), 'cancel_requested', 1)
  log(id, 'cancel_requested', '{}', now)
  cancel_ids[#cancel_ids + 1] = id
end
for i = 7 + asks, #ARGV do
  end_queued(ARGV[i], 'cancelled', now, 'cancelled', ARGV[5], ARGV[4], nil)
end
publish()
return {'ok', redis.call('HGETALL', run_key(ARGV[2]))}
