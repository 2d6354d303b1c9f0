-- event_append: append events to a run's log, fenced.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  run id    ARGV[3] fence
-- ARGV[4..] pairs: kind, data (JSON)
-- Returns  the new seqs, or {} when the fence was refused (nothing appended)
local now = now_of(ARGV[1])
local id, fence = ARGV[2], ARGV[3]
local f = redis.call('HMGET', run_key(id), 'fence', 'state')
if f[1] ~= fence or f[2] ~= 'running' then return {} end
local seqs = {}
for i = 4, #ARGV, 2 do seqs[#seqs + 1] = log(id, ARGV[i], ARGV[i + 1], now) end
publish()
return seqs
