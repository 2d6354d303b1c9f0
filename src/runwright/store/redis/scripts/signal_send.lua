-- signal_send: keep a signal of a run and wake it (rules.plan_signal, decided in Python).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  run id    ARGV[3] the run's state the decision was made on
-- ARGV[4]  the run's signal_seq the decision was made on ('0' for none)
-- ARGV[5]  name    ARGV[6] payload (JSON)    ARGV[7] key or NIL    ARGV[8] sender or NIL
-- ARGV[9]  the `signalled` event's data
-- Returns  {'stale'} when the run's state or signals changed since the decision (the caller
--          reads and decides again), else {'ok', seq, the signal's JSON}
local now = now_of(ARGV[1])
local id = ARGV[2]
local run = redis.call('HMGET', run_key(id), 'state', 'signal_seq')
if run[1] ~= ARGV[3] or (run[2] or '0') ~= ARGV[4] then return {'stale'} end
local seq = int(tonumber(ARGV[4]) + 1)
local text = keep_signal(id, seq, ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], now)
publish()
return {'ok', seq, text}
