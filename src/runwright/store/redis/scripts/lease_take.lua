-- lease_take: take a named lease if it is free, lapsed or already the holder's (renew).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)
-- ARGV[2]  the lease's name    ARGV[3] holder    ARGV[4] lease seconds
-- Returns  1 when the holder holds it now, else 0
--
-- lease:<name> is a hash {holder, expires_at}, judged by the server's clock (TIME), so
-- a process whose own clock is off neither steals a live lease nor keeps a lapsed one.
local now = now_of(ARGV[1])
local key = P .. 'lease:' .. ARGV[2]
local held = redis.call('HMGET', key, 'holder', 'expires_at')
if held[1] and held[1] ~= ARGV[3] and tonumber(held[2]) > now then return 0 end
redis.call('HSET', key, 'holder', ARGV[3], 'expires_at', num(now + tonumber(ARGV[4])))
return 1
