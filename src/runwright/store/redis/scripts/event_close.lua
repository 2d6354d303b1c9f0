-- event_close: close, fenced, a run's wait for an event if it is still waiting (its
-- timeout passed): no later publish delivers to it. A delivered one stays delivered.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  run id    ARGV[2] fence    ARGV[3] journal position
-- Returns  {'lost'} when the fence was refused (nothing written), else {'ok'}
local id, position = ARGV[1], ARGV[3]
if not owns(load_fields(id, {'state', 'fence'}), ARGV[2]) then return {'lost'} end
local text = redis.call('HGET', P .. 'evw:' .. id, position)
if text then
  local wait = cjson.decode(text)
  if wait.state == 'waiting' then
    wait.state = 'closed'
    redis.call('HSET', P .. 'evw:' .. id, position, cjson.encode(wait))
    redis.call('HDEL', P .. wait.waiting, id .. ':' .. position)
  end
end
return {'ok'}
