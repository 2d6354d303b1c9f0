-- worker_heartbeat: refresh a worker's liveness, if it is still registered.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  worker id    ARGV[2] now ('' = the server's clock; 'keep': leave the
--          heartbeat time, a liveness refresh only)
-- ARGV[3]  the liveness key's TTL in milliseconds
-- Returns  1, or 0 if the registration is gone (it was declared dead): the worker must
--          register again, and its old runs were, or will be, taken over
--
-- The liveness key is taken again even if it had lapsed (a connection that blinked is
-- not a dead worker); a rescuer that got there first has already dropped the registration.
local id = ARGV[1]
if redis.call('HEXISTS', P .. 'workers', id) == 0 then return 0 end
if ARGV[2] ~= 'keep' then redis.call('HSET', P .. 'beats', id, num(now_of(ARGV[2]))) end
redis.call('SET', P .. 'alive:' .. id, 1, 'PX', ARGV[3])
return 1
