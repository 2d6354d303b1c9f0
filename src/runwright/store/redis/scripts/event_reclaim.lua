-- event_reclaim: forget the ids of events published more than an age ago (retention),
-- judged by the server's clock unless a time is injected.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  now ('' = the server's clock)    ARGV[2] the age (seconds)    ARGV[3] at most this many
-- Returns  how many were forgotten
local now = now_of(ARGV[1])
local old = redis.call('ZRANGEBYSCORE', P .. 'evpubat', '-inf', '(' .. num(now - tonumber(ARGV[2])),
                       'LIMIT', 0, tonumber(ARGV[3]))
for _, field in ipairs(old) do
  redis.call('HDEL', P .. 'evpub', field)
  redis.call('ZREM', P .. 'evpubat', field)
end
return #old
