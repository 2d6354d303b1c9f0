-- schedule_advance: move a schedule's next fire time, only if it is still the expected
-- one: of the workers firing the same time, one wins.
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  name    ARGV[2] expected next fire time    ARGV[3] new next fire time
-- Returns  1 when moved, else 0
if redis.call('HGET', P .. 'sched:next', ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', P .. 'sched:next', ARGV[1], ARGV[3])
return 1
