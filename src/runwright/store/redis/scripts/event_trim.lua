-- event_trim: cut runs' logs to their last events behind a `trimmed` marker (retention).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)    ARGV[2] the marker's kind
-- then     per run: its id, the marker's seq, the marker's data (JSON) (rules.trim_marker)
-- Returns  per run, 1 when its log was cut, 0 when it was not (the run is gone, or its
--          log was cut as far already)
--
-- ev:<id> holds seq n at index n - 1 - base, base = trimmed_seq - 1 once trimmed (index 0
-- is then the marker). The marker takes the seq of the newest event removed: nothing is
-- renumbered, and the run's appends (RPUSH at the tail) are untouched by a cut at the
-- head. A thread's tev:<n> keeps the names of removed events; its reader skips them.
local now = now_of(ARGV[1])
local out = {}
for i = 3, #ARGV, 3 do
  local id, marker = ARGV[i], tonumber(ARGV[i + 1])
  local f = redis.call('HMGET', run_key(id), 'last_seq', 'trimmed_seq')
  local trimmed = tonumber(f[2] or '0')
  if f[1] and marker > trimmed and marker <= tonumber(f[1]) then
    local base = math.max(trimmed - 1, 0)
    redis.call('LTRIM', P .. 'ev:' .. id, marker - 1 - base, -1)
    redis.call('LSET', P .. 'ev:' .. id, 0, cjson.encode({ARGV[2], ARGV[i + 2], num(now)}))
    redis.call('HSET', run_key(id), 'trimmed_seq', marker)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
