-- signal_take: the signal a run's wait at a journal position reads, fenced: the one taken
-- there already (a replay), else the oldest pending signal of the name, taken now.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  run id    ARGV[3] fence    ARGV[4] journal position    ARGV[5] name
-- Returns  {'lost'} when the fence was refused (nothing written), {'none'} when no signal
--          of the name is pending, else {'ok', seq, the signal's JSON}
local now = now_of(ARGV[1])
local id, position, name = ARGV[2], ARGV[4], ARGV[5]
if not owns(load_fields(id, {'state', 'fence'}), ARGV[3]) then return {'lost'} end
local sigs = P .. 'sigs:' .. id
local seq = redis.call('HGET', P .. 'sigpos:' .. id, position)
if not seq then
  local pending = P .. 'sigpend:' .. id .. ':' .. name
  local first = redis.call('ZRANGE', pending, 0, 0)
  if #first == 0 then return {'none'} end
  seq = first[1]
  redis.call('ZREM', pending, seq)
  redis.call('HSET', P .. 'sigpos:' .. id, position, seq)
  redis.call('HINCRBY', run_key(id), 'signals_pending', -1)
  local signal = cjson.decode(redis.call('HGET', sigs, seq))
  signal.position, signal.taken_at = position, num(now)
  redis.call('HSET', sigs, seq, cjson.encode(signal))
end
return {'ok', seq, redis.call('HGET', sigs, seq)}
