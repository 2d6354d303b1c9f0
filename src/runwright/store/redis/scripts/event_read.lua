-- event_read: events of runs' logs by (run, seq), for a page of a thread's log. A script
-- so that a run's base and the entries are read at one instant: a trim between the two
-- would shift every index.
--
-- KEYS[1]  <prefix>ids
-- ARGV     pairs: run id, seq
-- Returns  per pair, the entry, or false when retention removed it
local bases = {}
local out = {}
for i = 1, #ARGV, 2 do
  local id, seq = ARGV[i], tonumber(ARGV[i + 1])
  if not bases[id] then
    bases[id] = math.max(tonumber(redis.call('HGET', run_key(id), 'trimmed_seq') or '0') - 1, 0)
  end
  local index = seq - 1 - bases[id]
  out[#out + 1] = index >= 0 and redis.call('LINDEX', P .. 'ev:' .. id, index) or false
end
return out
