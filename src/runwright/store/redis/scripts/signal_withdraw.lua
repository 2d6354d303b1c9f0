-- signal_withdraw: mark a signal no wait has taken yet withdrawn (an update its sender gave
-- up on): kept, listed, never taken.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  run id    ARGV[3] seq    ARGV[4] the `withdrawn` event's data
-- Returns  1 when withdrawn, 0 when it was taken already (or is not there)
local now = now_of(ARGV[1])
local id, seq = ARGV[2], ARGV[3]
local sigs = P .. 'sigs:' .. id
local text = redis.call('HGET', sigs, seq)
if not text then return 0 end
local signal = cjson.decode(text)
if signal.position or signal.withdrawn_at then return 0 end
signal.withdrawn_at = num(now)
redis.call('HSET', sigs, seq, cjson.encode(signal))
redis.call('ZREM', P .. 'sigpend:' .. id .. ':' .. signal.name, seq)
redis.call('HINCRBY', run_key(id), 'signals_pending', -1)
log(id, 'withdrawn', ARGV[4], now)
publish()
return 1
