-- schedule_delete: forget a schedule.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  name
-- Returns  1, or 0 if the schedule is unknown
local found = redis.call('HDEL', P .. 'sched:def', ARGV[1])
for _, part in ipairs({'timing', 'next', 'paused', 'created', 'updated'}) do
  redis.call('HDEL', P .. 'sched:' .. part, ARGV[1])
end
return found
