-- fork: a new run whose journal begins as a copy of another run's first entries
-- (RunStore.run_fork), inserted and filled in this one script.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  the original run's id
-- ARGV[3]  the position the copy stops before (rules.fork_end)
-- ARGV[4]  how many entries the decision found below it
-- ARGV[5]  the name the entry at that position bore ('' when the decision was by number)
-- ARGV[6]  the `forked` event's data
-- ARGV[7..] the fork's INSERT_FIELDS values (see insert.lua)
-- Returns  {'stale'} when the original's journal below the stop is not as the decision
--          found it (a retry dropped entries since: the caller decides again), else
--          {existed (0/1), the run's hash as a flat list}; an existing key copies nothing.
local now = now_of(ARGV[1])
local original, stop = ARGV[2], tonumber(ARGV[3])
local existing = redis.call('HGET', P .. 'keys', ARGV[7])
if existing then return {1, redis.call('HGETALL', run_key(existing))} end
if redis.call('EXISTS', run_key(original)) == 0 then return {'stale'} end
-- The journal is steps:<id>, with what precedes its last done snapshot in steps_old:<id>.
local below, at_stop = {}, nil
for _, key in ipairs({P .. 'steps_old:' .. original, P .. 'steps:' .. original}) do
  local flat = redis.call('HGETALL', key)
  for i = 1, #flat, 2 do
    local position = tonumber(flat[i])
    if position < stop then below[#below + 1] = {position, flat[i + 1]}
    elseif position == stop then at_stop = flat[i + 1] end
  end
end
if #below ~= tonumber(ARGV[4]) then return {'stale'} end
if ARGV[5] ~= '' and (not at_stop or cjson.decode(string.match(at_stop, '^(.-)\n'))[2] ~= ARGV[5]) then
  return {'stale'}
end
local id = insert_one(7, now)
-- Born at fence 1, as if claimed once: a worker reads no journal on a run's first claim
-- (fence 1, engine/_executor.py), and a fork's first claim must read the copy.
redis.call('HSET', run_key(id), 'forked_from', original, 'fence', 1)
redis.call('SADD', P .. 'forks:' .. original, id)  -- what a list of the original's forks reads
-- Entries are copied as written (fence and time too); a copied done snapshot archives
-- what precedes it, as a snapshot journaled by the fork itself would.
local steps, last = P .. 'steps:' .. id, -1
for _, entry in ipairs(below) do
  redis.call('HSET', steps, entry[1], entry[2])
  if entry[1] > last and is_snapshot(entry[2]) then last = entry[1] end
end
if last >= 0 then archive_before(id, last) end
log(id, 'forked', ARGV[6], now)
publish()
return {0, redis.call('HGETALL', run_key(id))}
