-- thread_append: add one message to the history of the run's own thread, fenced.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  run id    ARGV[2] fence    ARGV[3] index within the run    ARGV[4] message (JSON)
-- Returns  1, or 0 when the fence was refused
--
-- History is the hash tmsg:<thread>, "<run id, 20 digits><index, 10 digits>" -> message:
-- the field orders the history, and a replayed append of the same index is a no-op.
local run = load(ARGV[1])
if not owns(run, ARGV[2]) then return 0 end
if run.thread_no then
  local field = pad(ARGV[1]) .. string.format('%010d', tonumber(ARGV[3]))
  redis.call('HSETNX', P .. 'tmsg:' .. run.thread_no, field, ARGV[4])
end
return 1
