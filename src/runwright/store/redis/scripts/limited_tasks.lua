-- limited_tasks: of some tasks, those with queued runs of some queues that carry
-- concurrency limits (read only; lqueued counts them per due set).
--
-- KEYS[1]  <prefix>ids
-- ARGV[1]  q, the number of queues; ARGV[2 .. 1+q] the queues; the rest, the tasks
-- Returns  the tasks found, each once
local queue_count = tonumber(ARGV[1])
local asked, found = {}, {}
for i = 2 + queue_count, #ARGV do asked[ARGV[i]] = true end
for i = 2, 1 + queue_count do
  for _, due in ipairs(dues_of(ARGV[i])) do
    if asked[due.task] and not found[due.task]
        and tonumber(redis.call('HGET', P .. 'lqueued', due.key) or '0') > 0 then
      found[due.task] = true
    end
  end
end
local out = {}
for task in pairs(found) do out[#out + 1] = task end
return out
