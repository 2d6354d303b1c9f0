-- count_due: queued runs of some queues due before a time, counted by task (read only).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  due_before    ARGV[2..] the queues
-- Returns  flat pairs {task, count}
local counts = {}
for i = 2, #ARGV do
  for _, due in ipairs(dues_of(ARGV[i])) do
    local n = redis.call('ZCOUNT', due.key, '-inf', '(' .. ARGV[1])
    if n > 0 then counts[due.task] = (counts[due.task] or 0) + n end
  end
end
local out = {}
for task, n in pairs(counts) do out[#out + 1] = task; out[#out + 1] = n end
return out
