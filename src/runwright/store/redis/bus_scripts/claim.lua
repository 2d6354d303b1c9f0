-- fleet claim: take slot (kind, ordinal) if no live life holds it, bumping its generation.
--
-- KEYS[1]  <P>life:<kind>-<n>   the life's hash (its TTL is the life's)
-- KEYS[2]  <P>generations       hash "<kind>-<n>" -> last generation (kept forever)
-- KEYS[3]  <P>names             set of slot names ever claimed (the census reads it)
-- ARGV     name, kind, ordinal, state, host, pid, drain_s, ttl_ms
-- Returns  the new generation, or false when a live life holds the slot
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local generation = redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('HSET', KEYS[1], 'kind', ARGV[2], 'ordinal', ARGV[3], 'generation', generation,
           'state', ARGV[4], 'host', ARGV[5], 'pid', ARGV[6], 'drain_s', ARGV[7],
           'claimed_at', tostring(now), 'heartbeat_at', tostring(now),
           'expires_at', tostring(now + tonumber(ARGV[8]) / 1000))
redis.call('PEXPIRE', KEYS[1], ARGV[8])
redis.call('SADD', KEYS[3], ARGV[1])
return generation
