-- count_due: queued runs of some queues due before a time, counted by task (read only).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  due_before    ARGV[2..] the queues
-- Returns  flat pairs {task, count}
local counts = {}
for i = 2, #ARGV do
  local queue = ARGV[i]
  for _, priority in ipairs(redis.call('SMEMBERS', P .. 'prios:' .. queue)) do
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', due_key(priority, queue), '-inf', '(' .. ARGV[1])) do
      local task = redis.call('HGET', run_key(tonumber(member)), 'task')
      counts[task] = (counts[task] or 0) + 1
    end
  end
end
local out = {}
for task, n in pairs(counts) do out[#out + 1] = task; out[#out + 1] = n end
return out
