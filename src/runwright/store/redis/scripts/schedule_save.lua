-- schedule_save: create a schedule, or update its definition.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  name    ARGV[2] definition (JSON)    ARGV[3] JSON [cron, tz]
-- ARGV[4]  paused (0/1)    ARGV[5] next_fire_at    ARGV[6] created_at    ARGV[7] updated_at
-- Returns  1
--
-- A declaration in code updates the definition but keeps the run-time state: paused, and
-- the next fire time unless the cron or time zone changed. Fields live in one hash per
-- attribute (sched:def, sched:next ...), each keyed by the schedule's name; next fire
-- times are written by the caller as exact decimal strings, so they compare exactly.
local name = ARGV[1]
local old_timing = redis.call('HGET', P .. 'sched:timing', name)
if old_timing ~= ARGV[3] then redis.call('HSET', P .. 'sched:next', name, ARGV[5]) end
redis.call('HSET', P .. 'sched:def', name, ARGV[2])
redis.call('HSET', P .. 'sched:timing', name, ARGV[3])
redis.call('HSETNX', P .. 'sched:paused', name, ARGV[4])
redis.call('HSETNX', P .. 'sched:created', name, ARGV[6])
redis.call('HSET', P .. 'sched:updated', name, ARGV[7])
return 1
