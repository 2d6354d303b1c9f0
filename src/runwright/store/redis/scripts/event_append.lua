-- event_append: append events to a run's log, fenced.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  run id    ARGV[3] fence
-- ARGV[4]  the mark of an emit (EventAppendParams.mark; NIL: none)
-- ARGV[5]  '1' when the caller replays the emit (never append it), else '0'
-- ARGV[6..] pairs: kind, data (JSON); one pair with a mark
-- Returns  without a mark: the new seqs, or {} when the fence was refused (nothing
--          appended); with a mark: {} when refused, else {seq} (appended now, or found:
--          the first seq of that emit), or {'none'} (replayed, and its mark is unknown)
--
-- An emit is part of the run's history, appended once however often its code runs:
-- emarks:<id> maps (mark, kind) to the seq of its first append. It outlives a trim of
-- the log (the seq is still the one the emit got) and goes with the run.
local now = now_of(ARGV[1])
local id, fence = ARGV[2], ARGV[3]
local f = redis.call('HMGET', run_key(id), 'fence', 'state')
if f[1] ~= fence or f[2] ~= 'running' then return {} end
local mark = opt(ARGV[4])
if not mark then
  local seqs = {}
  for i = 6, #ARGV, 2 do seqs[#seqs + 1] = log(id, ARGV[i], ARGV[i + 1], now) end
  publish()
  return seqs
end
local marks, place = P .. 'emarks:' .. id, cjson.encode({mark, ARGV[6]})
local found = redis.call('HGET', marks, place)
if found then return {tonumber(found)} end
if ARGV[5] == '1' then return {'none'} end
local seq = log(id, ARGV[6], ARGV[7], now)
redis.call('HSET', marks, place, seq)
publish()
return {seq}
