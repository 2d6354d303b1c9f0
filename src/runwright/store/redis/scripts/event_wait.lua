-- event_wait: register, fenced, a run's wait for an event at a journal position (once: a
-- replay finds the registration as it stands and changes nothing).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  run id    ARGV[3] fence    ARGV[4] journal position
-- ARGV[5]  the registration's JSON {name, tenant, match (JSON text: cjson would turn an
--          empty array into an object)} (state and time added here)
-- ARGV[6]  the waiting hash's key suffix (evwaiting:<tenant's length>:<tenant>:<name>)
-- Returns  {'lost'} when the fence was refused (nothing written), else {'ok'}
--
-- evw:<id> holds a run's registrations, position -> JSON {name, tenant, match,
-- registered_at, state, event_id}; the waiting hash of its tenant and name holds the
-- waiting ones, "<id>:<position>" -> match JSON: what a publish reads.
local now = now_of(ARGV[1])
local id, position = ARGV[2], ARGV[4]
if not owns(load_fields(id, {'state', 'fence'}), ARGV[3]) then return {'lost'} end
if redis.call('HEXISTS', P .. 'evw:' .. id, position) == 1 then return {'ok'} end
local wait = cjson.decode(ARGV[5])
wait.registered_at, wait.state, wait.waiting = num(now), 'waiting', ARGV[6]
redis.call('HSET', P .. 'evw:' .. id, position, cjson.encode(wait))
redis.call('HSET', P .. ARGV[6], id .. ':' .. position, wait.match)
return {'ok'}
