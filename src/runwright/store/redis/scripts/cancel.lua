-- cancel: apply rules.plan_cancel to a run and its open descendants, the family read
-- here: running members not yet asked are asked to stop, queued ones end now.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  the run id
-- ARGV[3]  the error a cancelled run ends with    ARGV[4] the `cancelled` event's data
-- Returns  {'missing'}; {'refused', the run's hash} when the run cannot be cancelled
--          (the caller raises rules.plan_cancel's error); else {'ok', the run's hash}
--
-- The family is read and cancelled in one step: a child inserted before it is in the
-- family; one inserted after finds its parent cancelled, or with a cancel requested, and
-- is born cancelled (insert_one, rules.born_cancelled). None escapes.
local now = now_of(ARGV[1])
local root = ARGV[2]
local state = redis.call('HGET', run_key(root), 'state')
if not state then return {'missing'} end
if state ~= 'running' and state ~= 'queued' then
  return {'refused', redis.call('HGETALL', run_key(root))}
end
local members, frontier = {root}, {root}
while #frontier > 0 do
  local next_frontier = {}
  for _, id in ipairs(frontier) do
    for _, child in ipairs(redis.call('SMEMBERS', P .. 'children:' .. id)) do
      members[#members + 1] = child
      next_frontier[#next_frontier + 1] = child
    end
  end
  frontier = next_frontier
end
table.sort(members, function(a, b) return tonumber(a) < tonumber(b) end)
local ends = {}
for _, id in ipairs(members) do
  local f = redis.call('HMGET', run_key(id), 'state', 'cancel_requested')
  if f[1] == 'running' and f[2] ~= '1' then
    redis.call('HSET', run_key(id), 'cancel_requested', 1)
    log(id, 'cancel_requested', '{}', now)
    cancel_ids[#cancel_ids + 1] = id
  elseif f[1] == 'queued' then
    ends[#ends + 1] = id
  end
end
for _, id in ipairs(ends) do
  end_queued(id, 'cancelled', now, 'cancelled', ARGV[4], ARGV[3], nil)
end
publish()
return {'ok', redis.call('HGETALL', run_key(root))}
