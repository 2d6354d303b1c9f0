-- fleet refresh: rewrite a life's state and extend its TTL, only while that life lasts.
--
-- KEYS[1]  <P>life:<kind>-<n>
-- ARGV     generation, state, drain_s, ttl_ms
-- Returns  1, or 0 when the life has ended (its key expired, or a newer generation holds it)
if redis.call('HGET', KEYS[1], 'generation') ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'drain_s', ARGV[3], 'heartbeat_at', tostring(now),
           'expires_at', tostring(now + tonumber(ARGV[4]) / 1000))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
