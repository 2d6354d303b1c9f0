-- schedule_pause: pause or resume a schedule; a resume may set the next fire time.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  name    ARGV[2] paused (0/1)    ARGV[3] next fire time or NIL    ARGV[4] now
-- Returns  1, or 0 if the schedule is unknown
local name = ARGV[1]
if redis.call('HEXISTS', P .. 'sched:def', name) == 0 then return 0 end
redis.call('HSET', P .. 'sched:paused', name, ARGV[2])
redis.call('HSET', P .. 'sched:updated', name, ARGV[4])
if opt(ARGV[3]) then redis.call('HSET', P .. 'sched:next', name, ARGV[3]) end
return 1
