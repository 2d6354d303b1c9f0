-- event_page: a page of a run's log. A script so that the log's base (it moves when the
-- log is trimmed) and the page are read at one instant.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  run id    ARGV[2] after (a seq)    ARGV[3] limit
-- Returns  {the seq of the first entry given, entries...}: a reader from before the
--          marker starts at the marker (index 0 once trimmed)
local id = ARGV[1]
local base = math.max(tonumber(redis.call('HGET', run_key(id), 'trimmed_seq') or '0') - 1, 0)
local start = math.max(tonumber(ARGV[2]) - base, 0)
local entries = redis.call('LRANGE', P .. 'ev:' .. id, start, start + tonumber(ARGV[3]) - 1)
table.insert(entries, 1, base + start + 1)
return entries
