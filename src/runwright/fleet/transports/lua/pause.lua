-- fleet pause / resume: the durable set of paused queues.
--
-- KEYS[1]  <P>paused
-- ARGV     queue, "1" to pause or "0" to resume
-- Returns  1 if the set changed, else 0
if ARGV[2] == '1' then return redis.call('SADD', KEYS[1], ARGV[1]) end
return redis.call('SREM', KEYS[1], ARGV[1])
